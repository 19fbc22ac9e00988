"""Training throughput of the real training step (`Pretrainer.train_step`: bf16 autocast, fused AdamW, clipping, NaN guard).

Prints one JSON record per configuration (benchmarks/common.py's format: command, date, machine, results): tokens/s,
MFU and peak memory. MFU = 6 * params * tokens/s / peak, with the peak the datasheet's dense bf16 figure: 989 TFLOP/s
for H100/H200 SXM (312 for A100), stated in the output. Runs against the installed package (`pip install -e .`).

    # one configuration (the h200 preset's model, B=16, T=2048)
    python benchmarks/bench_train.py --batch 16 --seq 2048 --steps 10 [--compile] [--dispatch triton] [--grad-checkpoint]
    # the four of the README table, each in its own process (clean peak memory), one JSON line each:
    # eager (+ gradient checkpointing: eager alone runs out of memory at B=16) and compiled, x pytorch/triton dispatch
    python benchmarks/bench_train.py --all
    # a CPU smoke run
    python benchmarks/bench_train.py --model tiny --batch 2 --seq 64 --steps 2 --warmup 1

`--dispatch triton` sets ENABLE_TRITON_KERNELS=1 for this process (the opt-in gate, chapter 02a) and
`--model.ssd_dispatch triton`. The data is the built-in corpus (1.5M tokens: 730 windows of 2048, enough for a
benchmark; the numbers don't depend on the text), or `--data DIR`.
"""
import argparse, json, os, subprocess, sys, tempfile, time

PEER = {"Transformer SDPA+compile (peer figure, an H200, 2026-12-01)": 146_699, "official Mamba-3 SISO (peer figure, an H200, 2026-12-01)": 75_258, "original Mamba-3-Lite (peer figure, an H200, 2026-12-01)": 37_872}


def run_one(a):
    "(the result, the device) of one configuration."
    if a.dispatch == "triton": os.environ["ENABLE_TRITON_KERNELS"] = "1"
    import torch
    from mamba3_lite.pretrain import build_config
    from mamba3_lite.train.metrics import PEAK_BF16_FLOPS, peak_flops, mfu
    from mamba3_lite.train.trainer import Pretrainer
    from common import sync, time_fn                                          # benchmarks/common.py
    over = dict(model=dict(max_seq_len=a.seq, grad_checkpoint=a.grad_checkpoint, ssd_dispatch=a.dispatch),
                batch_size=a.batch, gradient_accumulation_steps=a.accum, compile_model=a.compile, compile_mode=a.compile_mode,
                max_steps=10**6, warmup_steps=10, save_every=10**9, eval_every=0, log_every=10**9, sample_tokens=0,
                data_path=a.data, checkpoint_dir=tempfile.mkdtemp(prefix="bench_train_"))
    cfg = build_config("h200" if a.model == "default" else "tiny", overrides=over)
    t = Pretrainer(cfg, echo=lambda m: None)
    cuda = t.device.type == "cuda"
    t_compile = time.perf_counter()
    for _ in range(a.warmup): t.train_step()                      # compile, autotune, allocator warm-up
    sync(t.device); t_compile = time.perf_counter() - t_compile
    if cuda: torch.cuda.reset_peak_memory_stats()
    losses = []
    timing = time_fn(lambda: losses.append(t.train_step()["loss"]), t.device, warmup=0, iters=a.steps)
    tok_s = t.tokens_per_step / timing["median_s"]
    peak = peak_flops(t.device)
    out = {"params": t.n_params, "batch": a.batch, "seq": a.seq, "accum": a.accum, "compile": a.compile, "dispatch": a.dispatch,
           "grad_checkpoint": a.grad_checkpoint, "steps": a.steps, "warmup_s": round(t_compile, 1),
           "step_ms": round(1000 * timing["median_s"], 1), "step_ms_min": round(1000 * timing["min_s"], 1),
           "tokens_per_s": round(tok_s), "mfu": peak and round(mfu(t.n_params, tok_s, peak), 4),
           "peak_flops_used": peak, "peak_flops_note": "datasheet dense bf16: " + ", ".join(f"{k} {v / 1e12:.0f}T" for k, v in PEAK_BF16_FLOPS.items()),
           "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if cuda else None,
           "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 1e9, 2) if cuda else None,
           "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)], "goal_tokens_per_s": 185_000, "peers": PEER}
    t.close()
    return out, t.device


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["default", "tiny"], default="default", help="default: the 434M model; tiny: the tiny preset's")
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--accum", type=int, default=1); p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    p.add_argument("--compile", action="store_true"); p.add_argument("--compile-mode", default="default")
    p.add_argument("--dispatch", choices=["pytorch", "triton"], default="pytorch")
    p.add_argument("--grad-checkpoint", action="store_true")
    p.add_argument("--data", default="builtin")
    p.add_argument("--out", help="also write the JSON here (one configuration)")
    p.add_argument("--all", action="store_true", help="eager/compiled x pytorch/triton, one process each")
    a = p.parse_args()
    if not a.all:
        from common import emit
        out, device = run_one(a)
        emit(out, device=device, out=a.out, benchmark="pretrainer_train_step"); return
    base = [sys.executable, __file__, "--model", a.model, "--batch", str(a.batch), "--seq", str(a.seq), "--accum", str(a.accum),
            "--steps", str(a.steps), "--warmup", str(a.warmup), "--data", a.data]
    for comp in (False, True):
        for disp in ("pytorch", "triton"):
            # eager without checkpointing does not fit 141 GB at B=16 x 2048 (benchmarks/results/model_eager_h200_oom.json)
            cmd = base + ["--dispatch", disp] + (["--compile"] if comp else ["--grad-checkpoint"])
            r = subprocess.run(cmd, capture_output=True, text=True)
            try: line = json.dumps(json.loads(r.stdout)) if r.returncode == 0 else None
            except json.JSONDecodeError: line = None
            print(line or json.dumps({"compile": comp, "dispatch": disp, "error": r.stderr.strip()[-1500:]}), flush=True)


if __name__ == "__main__":
    main()
