"""Where the real trainer's step loses GPU time: the wall time of `Pretrainer.train_step` against the time the GPU is
busy, and every idle gap on the GPU with what the CPU was doing then (the host op that launched the kernel after the gap,
and the op the CPU was inside when the gap began). Prints one JSON record (benchmarks/common.py's format).

    ENABLE_TRITON_KERNELS=1 python benchmarks/profile_train_step.py --out benchmarks/results/train_step_gaps_h200.json

The configuration is the `h200` preset with the Triton opt-in (B=16, T=2048, 2 micro-batches a step), as
`python -m mamba3_lite.pretrain --preset h200 --model.ssd_dispatch triton` runs it; `--seq/--batch/--accum` change it.
Timed steps run without the profiler (tokens/s); profiled steps only give the split of their wall time.
"""
import argparse, bisect, gc, json, os, tempfile, time
from collections import Counter

import torch

from common import emit, sync

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_OPS = ("TorchDynamo Cache Lookup", "Optimizer.step#AdamW.step", "aten::pin_memory", "aten::_local_scalar_dense",
            "Optimizer.zero_grad#AdamW.zero_grad", "Torch-Compiled Region: 0/0")      # host time over the profiled steps


def gaps_from_trace(trace: dict, min_gap_us: float = 5.0) -> dict:
    "Busy and idle GPU time over the profiled window, the idle time by the host op that launched the next kernel, the largest gaps."
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e for e in ev if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    if not gpu: return {"gpu_busy_ms": 0.0, "gpu_idle_ms": 0.0, "note": "no GPU activity in the trace"}
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = {}
    for e in ev:
        if e.get("cat") in ("cpu_op", "user_annotation"): ops.setdefault(e["tid"], []).append(e)
    for tid in ops: ops[tid].sort(key=lambda o: o["ts"])
    starts = {tid: [o["ts"] for o in os_] for tid, os_ in ops.items()}
    long_ops = {tid: [o for o in os_ if o["dur"] > 2000] for tid, os_ in ops.items()}

    def inside(tid, ts):
        "Host ops on thread `tid` running at `ts`, outermost first (the last 3,000 to start, and every op over 2 ms)."
        i = bisect.bisect_right(starts.get(tid, []), ts)
        near = ops.get(tid, [])[max(0, i - 3000):i]
        found = {id(o): o for o in near + long_ops.get(tid, []) if o["ts"] <= ts <= o["ts"] + o["dur"]}
        return sorted(found.values(), key=lambda o: -o["dur"])

    busy, end, gaps = 0.0, None, []
    for e in gpu:
        s, f = e["ts"], e["ts"] + e["dur"]
        if end is None: busy, end = e["dur"], f; continue
        if s > end + min_gap_us:
            gaps.append((s - end, end, e))
        busy += max(0.0, f - max(s, end)); end = max(end, f)
    window = end - gpu[0]["ts"]
    host_time = Counter()
    for tid_ops in ops.values():
        for o in tid_ops:
            if o["name"] in HOST_OPS or o["name"].startswith("host: "): host_time[o["name"]] += o["dur"]
    by_launcher, top = Counter(), []
    for gap, start, nxt in sorted(gaps, key=lambda g: -g[0]):
        l = launch.get(nxt.get("args", {}).get("correlation"))
        chain = [o["name"] for o in inside(l["tid"], l["ts"])] if l else []
        key = " > ".join(chain[:2] + chain[-1:]) if chain else "(no launch event)"
        by_launcher[key] += gap
        if len(top) < 25:
            host = [o["name"] for o in inside(l["tid"], start)] if l else []
            top.append({"gap_us": round(gap, 1), "next_kernel": nxt["name"][:90], "launched_in": chain[:3] + chain[-2:],
                        "host_at_gap_start": host[:2] + host[-2:]})
    return {"window_ms": round(window / 1e3, 2), "gpu_busy_ms": round(busy / 1e3, 2),
            "gpu_idle_ms": round((window - busy) / 1e3, 2), "gaps_counted": len(gaps), "min_gap_us": min_gap_us,
            "idle_ms_by_launching_op": {k: round(v / 1e3, 3) for k, v in by_launcher.most_common(20)},
            "host_ms_by_op": {k: round(v / 1e3, 3) for k, v in host_time.most_common()}, "largest_gaps": top}


def kernel_table(trace: dict, steps: int) -> dict:
    "GPU activities (kernels, copies, memsets) per step: how many, and each name's count and milliseconds, largest first."
    gpu = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    n, ms = Counter(), Counter()
    for e in gpu: n[e["name"][:110]] += 1; ms[e["name"][:110]] += e["dur"] / 1e3
    return {"launches_per_step": round(len(gpu) / steps, 1),
            "by_name": [{"name": k, "calls_per_step": round(n[k] / steps, 1), "ms_per_step": round(v / steps, 3)}
                        for k, v in ms.most_common()]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=2048); p.add_argument("--batch", type=int, default=16)
    p.add_argument("--accum", type=int, default=2); p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=10, help="timed steps (no profiler)")
    p.add_argument("--profile-steps", type=int, default=2)
    p.add_argument("--trace", help="also keep the chrome trace here")
    p.add_argument("--preset", default="h200", help="tiny: a CPU smoke run of this script")
    p.add_argument("--annotate", action="store_true", help="name the step's host phases in the trace (next batch, "
                   "model call, backward, model.train(), the guard, the host sync, Python's garbage collector), so a gap's "
                   "`host_at_gap_start` says which phase the CPU was in")
    p.add_argument("--look-ahead", action="store_true", help="steps as `Pretrainer.train` runs them: the next step's "
                   "first micro-batch queued before each step's host sync (07g)")
    p.add_argument("--out")
    a = p.parse_args()
    os.environ["ENABLE_TRITON_KERNELS"] = "1"
    from mamba3_lite.pretrain import build_config
    from mamba3_lite.train.trainer import Pretrainer
    over = dict(model=dict(max_seq_len=a.seq, ssd_dispatch="triton" if a.preset == "h200" else "pytorch"), batch_size=a.batch, gradient_accumulation_steps=a.accum,
                max_steps=10**6, warmup_steps=10, save_every=10**9, eval_every=0, log_every=10**9, sample_tokens=0,
                checkpoint_dir=tempfile.mkdtemp(prefix="profile_step_"))
    t = Pretrainer(build_config(a.preset, overrides=over), echo=lambda m: None, progress=False)
    gc_hook = annotate(t) if a.annotate else None
    step = (lambda: t.train_step(look_ahead=True)) if a.look_ahead else t.train_step
    for _ in range(a.warmup): step()
    sync(t.device)
    out = {"config": {"seq": a.seq, "batch": a.batch, "accum": a.accum, "preset": a.preset, "look_ahead": a.look_ahead,
                      "ssd_dispatch": over["model"]["ssd_dispatch"]}, **measure(t, step, a)}
    t.close()
    if gc_hook: gc.callbacks.remove(gc_hook)          # not at interpreter exit, when record_function is gone
    emit(out, device=t.device, out=a.out, benchmark="train_step_gpu_gaps")


def annotate(t):
    """Wrap the step's host phases in `record_function` ranges (the trainer's code is not changed: its objects are
    wrapped). Returns the hook it gave Python's gc."""
    from torch.profiler import record_function
    from mamba3_lite.train import trainer
    def named(fn, name):
        def run(*args, **kw):
            with record_function(name): return fn(*args, **kw)
        return run
    inner = t._batches.it                                  # 06f's Prefetched draws from it, ahead or not
    def drawn():
        while True:
            with record_function("host: next batch (sampler, pin, copy)"): b = next(inner)
            yield b
    t._batches.it = drawn()
    t._loss = named(t._loss, "host: model call (forward)")
    values = trainer.HostCopy.values
    trainer.HostCopy.values = lambda self: named(values, "host: the step's sync (waits for the GPU)")(self)
    backward = torch.Tensor.backward
    torch.Tensor.backward = lambda self, *a, **k: named(backward, "host: backward")(self, *a, **k)
    t.train_model.train = named(t.train_model.train, "host: model.train()")
    t.guard.update = named(t.guard.update, "host: the guard's verdict")
    open_gc = []
    def gc_range(phase, info):
        "Python's garbage collector as a range of its own (it runs inside whatever op allocated last)."
        if phase == "start": open_gc.append(record_function(f"host: gc, generation {info['generation']}")); open_gc[-1].__enter__()
        elif open_gc: open_gc.pop().__exit__(None, None, None)
    gc.callbacks.append(gc_range)
    return gc_range


def measure(t, step, a):
    "Median time of `step()` over `a.steps` timed steps, then the gap analysis of `a.profile_steps` profiled ones."
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)   # train_step ends with a host sync
    step_s = sorted(times)[len(times) // 2]
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(a.profile_steps): step()
        profiled_s = time.perf_counter() - t0
    path = a.trace or os.path.join(tempfile.mkdtemp(prefix="profile_step_trace_"), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f: trace = json.load(f)
    out = {"step_ms_median": round(1e3 * step_s, 2), "tokens_per_s": round(t.tokens_per_step / step_s),
           "steps_ms": [round(1e3 * s, 2) for s in times], "profiled_steps": a.profile_steps,
           "profiled_wall_ms_per_step": round(1e3 * profiled_s / a.profile_steps, 2), "gaps": gaps_from_trace(trace),
           "kernels": kernel_table(trace, a.profile_steps)}
    out["gaps"]["per_step_idle_ms"] = round(out["gaps"]["gpu_idle_ms"] / a.profile_steps, 2)
    print(json.dumps({k: v for k, v in out.items() if k != "gaps"}), flush=True)
    return out


if __name__ == "__main__":
    main()
