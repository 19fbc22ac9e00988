"""Why some training steps are slower than others: each step's host time beside its GPU time (CUDA events recorded at
every step's start, so the GPU time between two of them is the work queued in between) and the card's SM clock and
power over that step (`common.ClockLog`: `nvidia-smi` every 50 ms in the background). Runs with Python's garbage
collector as it is, off, or frozen after warm-up, to see whether the host's pauses reach the GPU; `--batch 1` leaves
the GPU little to do, so the step time is the host's time to queue a step. Prints one JSON record (common.py's
format); on a CPU it refuses.

    ENABLE_TRITON_KERNELS=1 python benchmarks/diag_step_jitter.py --steps 30 --gc auto off freeze --out benchmarks/results/step_jitter_h200.json

The configuration is the `h200` preset with the Triton opt-in (B=16, T=2048, 2 micro-batches a step) and the
trainer's look-ahead, as `python -m mamba3_lite.pretrain --preset h200 --model.ssd_dispatch triton` runs it.
"""
import argparse, gc, os, statistics, sys, tempfile

import torch

from common import ClockLog, emit, sync, timed_steps


def run(t, step, n: int, gc_mode: str) -> list[dict]:
    "`common.timed_steps` of `n` steps with gc as `gc_mode` says."
    if gc_mode == "off": gc.disable()
    if gc_mode == "freeze": gc.collect(); gc.freeze()
    try: rows = timed_steps(step, n, t.device)
    finally: gc.enable(); gc.unfreeze()
    for r in rows: del r["out"]
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=2048); p.add_argument("--batch", type=int, default=16)
    p.add_argument("--accum", type=int, default=2); p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--gc", nargs="+", default=["auto", "off"], choices=["auto", "off", "freeze"])
    p.add_argument("--out")
    a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("diag_step_jitter: needs a CUDA GPU (it times steps with CUDA events)")
    os.environ["ENABLE_TRITON_KERNELS"] = "1"
    from mamba3_lite.pretrain import build_config
    from mamba3_lite.train.trainer import Pretrainer
    over = dict(model=dict(max_seq_len=a.seq, ssd_dispatch="triton"), batch_size=a.batch, gradient_accumulation_steps=a.accum,
                max_steps=10**6, warmup_steps=10, save_every=10**9, eval_every=0, log_every=10**9, sample_tokens=0,
                checkpoint_dir=tempfile.mkdtemp(prefix="jitter_"))
    t = Pretrainer(build_config("h200", overrides=over), echo=lambda m: None, progress=False)
    step = lambda: t.train_step(look_ahead=True)
    for _ in range(a.warmup): step()
    sync(t.device)
    with ClockLog() as clocks:
        out = {mode: run(t, step, a.steps, mode) for mode in a.gc}
    summary = {}
    for mode, rows in out.items():
        for r in rows:
            c = clocks.between(r["host_start"], r["host_start"] + r["host_ms"] / 1e3) or {}
            r.update(host_ms=round(r["host_ms"], 2), gpu_ms=round(r["gpu_ms"], 2), sm_mhz=c.get("sm_mhz"), watts=c.get("watts"),
                     reasons=c.get("reasons"))
        g, h = [r["gpu_ms"] for r in rows[1:-1]], [r["host_ms"] for r in rows[1:-1]]     # the ends hold the look-ahead's edges
        summary[mode] = {"gpu_ms_mean": round(statistics.mean(g), 2), "gpu_ms_median": round(statistics.median(g), 2),
                         "gpu_ms_min": min(g), "gpu_ms_max": max(g), "host_ms_mean": round(statistics.mean(h), 2),
                         "tokens_per_s_mean": round(t.tokens_per_step / (statistics.mean(g) / 1e3)),
                         "clocks": clocks.between(rows[1]["host_start"], rows[-1]["host_start"])}
        for r in rows: del r["host_start"]
    t.close()
    emit({"config": {"seq": a.seq, "batch": a.batch, "accum": a.accum, "look_ahead": True}, "summary": summary, "steps": out},
         device=t.device, out=a.out, benchmark="train_step_jitter")


if __name__ == "__main__":
    main()
