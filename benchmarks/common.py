"""What every benchmark script shares: a description of the machine, an honest timer, and one JSON result format.

Benchmarks run against the installed package (`pip install -e .`), from a checkout: `python benchmarks/NAME.py ...`
(Python puts this folder on `sys.path`, so `from common import ...` needs no path edits).
"""
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def cpu_name() -> str:
    "The CPU model from /proc/cpuinfo where there is one."
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine(device: torch.device | None = None) -> dict:
    "What a figure was measured on: GPU (or CPU) model, torch/triton/python versions, core count."
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    out = {"cpu": cpu_name(), "cpu_threads": torch.get_num_threads(), "python": platform.python_version(),
           "torch": torch.__version__, "triton": triton_version}
    if device is not None and device.type == "cuda":
        out.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                   gpu_memory_gib=round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1))
    return out


def sync(device):
    "Wait for the device's queued work, so that wall-clock timings are honest."
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn, device, warmup: int = 3, iters: int = 10) -> dict:
    "Median and min seconds per call of `fn()` after `warmup` calls; the device is synchronised around every call."
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"median_s": times[len(times) // 2], "min_s": times[0], "iters": iters}


def cuda_event_ms(fn, iters: int = 20, warmup: int = 3) -> float:
    "Median GPU milliseconds per call of `fn()` between two CUDA events (what the kernel sweeps rank by)."
    for _ in range(warmup):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        s.record(); fn(); e.record(); e.synchronize(); times.append(s.elapsed_time(e))
    return sorted(times)[iters // 2]


def queued_ms(fn, calls: int = 20, warmup: int = 3) -> float:
    "GPU milliseconds per call of `fn()`, `calls` of them queued back to back between two CUDA events (as a training step queues them: no launch latency in the figure)."
    for _ in range(warmup):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(calls):
        fn()
    e.record(); e.synchronize()
    return s.elapsed_time(e) / calls


def graph_ms(fn, calls: int = 20, replays: int = 10) -> float:
    "GPU milliseconds per call of `fn()`, `calls` of them captured in one CUDA graph and replayed `replays` times (kernels of a few µs: no host in the figure)."
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls): fn()
    g.replay(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(replays): g.replay()
    e.record(); e.synchronize()
    return s.elapsed_time(e) / (calls * replays)


def kernel_rows(prof, steps: int) -> list[tuple[str, float, int]]:
    "(kernel, GPU ms per step, calls per step) of a `torch.profiler` run over `steps` steps, costliest first."
    rows = [(e.key, e.device_time_total / steps / 1000, e.count // steps) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])


def compiled_train_step(model, batch: int = 16, seq: int = 2048, clip: float | None = None):
    """A step function for `model` on the GPU: compiled, bf16 autocast, fused AdamW (lr 3e-4), random GPT-2 token ids
    (B, seq + 1); clips the gradient norm to `clip` if given. Each call runs forward, backward and the update; returns the loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    cmodel = torch.compile(model)
    xy = torch.randint(0, 50257, (batch, seq + 1), device="cuda")
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(xy[:, :-1], targets=xy[:, 1:])
        loss.backward()
        if clip is not None: torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step(); opt.zero_grad(set_to_none=True)
        return loss
    return step


def rel_diff(a, b) -> float:
    "max |a - b| / max |b|, in fp32."
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def sweep_cli(doc: str, name: str, extra=None):
    """The command line of a launch sweep at the training shape: `--rounds`, `--batch`, `--seq` (the 434M model's micro-batch
    by default; `--batch 4 --seq 8192` for the long run's), `--out`, and what `extra(parser)` adds; refuses on a CPU.
    Returns (args, shape dict)."""
    import argparse
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out")
    if extra: extra(p)
    a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit(f"{name}: needs a CUDA GPU (it times kernels)")
    return a, dict(TRAINING_SHAPE, Bsz=a.batch, T=a.seq)


def use_gemm_templates(persistent_tma: bool = True, search_space: str = "DEFAULT"):
    "Inductor set to benchmark its Triton GEMM templates (persistent TMA ones too, if asked) against cuBLAS for every GEMM it compiles from now on, keeping the fastest."
    import torch._inductor.config as inductor
    inductor.max_autotune_gemm = True
    inductor.max_autotune_gemm_backends = "ATEN,TRITON"
    inductor.max_autotune_gemm_search_space = search_space
    inductor.triton.enable_persistent_tma_matmul = persistent_tma


def flat_tensors(out) -> list:
    "A kernel wrapper's results, nested one level in tuples or lists, as one flat list (what `sweep_launches` compares)."
    return [t for part in out for t in (part if isinstance(part, (tuple, list)) else (part,))]


def sweep_launches(forms: dict, rounds: int = 3, label: str = "kernel") -> dict:
    """Each of `forms` = {name: (fn, current, grid)} timed at every launch in `grid` (dicts of keyword arguments for
    `fn`, which returns its output tensors) as a training step queues it (`queued_ms`, the median of `rounds`), its
    outputs against `fn(**current)`'s (the largest `rel_diff`). A launch that fails (out of shared memory, say) is a
    row with its error; one that leaves the CUDA context unusable (an illegal memory access) ends the sweep there, as
    `stopped_at`, keeping the rows before it. Each row is printed as it is timed. Returns {"rows": the timed rows by
    (name, ms), then the failed; "fastest"; "at_current"}, the last two for the forms that have timed rows
    (at_current None where the current launch failed)."""
    rows, stopped = [], None
    for name, (fn, current, grid) in forms.items():
        ref = fn(**current)
        for kw in grid if current in grid else [current, *grid]:
            try:
                diff = max(rel_diff(o, r) for o, r in zip(fn(**kw), ref))
                ms = statistics.median(queued_ms(lambda: fn(**kw)) for _ in range(rounds))   # both synchronise
            except Exception as e:
                rows.append({label: name, **kw, "error": f"{type(e).__name__}: {str(e)[:160]}"})
                print(json.dumps(rows[-1]), flush=True)
                if "CUDA" in str(e):            # sticky: every later call on this context fails too
                    stopped = rows[-1]; break
                continue
            rows.append({label: name, **kw, "ms": round(ms, 4), "rel_diff": diff, "current": kw == current})
            print(json.dumps(rows[-1]), flush=True)
        if stopped: break
    ok = sorted((r for r in rows if "ms" in r), key=lambda r: (r[label], r["ms"]))
    timed = [n for n in forms if any(r[label] == n for r in ok)]
    return {"fastest": {n: next(r for r in ok if r[label] == n) for n in timed},
            "at_current": {n: next((r for r in ok if r[label] == n and r["current"]), None) for n in timed},
            "rows": ok + [r for r in rows if "error" in r], **({"stopped_at": stopped} if stopped else {})}


def scan_backward_inputs(Bsz, T, H, M, D, Q, seed=0):
    """Random bf16 q, k (B,T,H,M), x, dy (B,T,H,D) on the GPU, chunk-local decays alpha (B,T,H), and the forward and
    reverse state passes' results (05b, at TUNE's blocks): what the scan's backward kernels read after the state pass.
    The decays are alpha alone, without 05a's low part: scripts on these inputs time the kernels as they ran before the
    pair (their recorded results predate it); `pair_scan_inputs` gives the pair, and exp_pair_launches.py its cost."""
    from mamba3_lite.ssd.triton.real_ssd import TUNE, state_blocks
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g).bfloat16()
    q, k, x, dy = r(Bsz, T, H, M), r(Bsz, T, H, M), r(Bsz, T, H, D), r(Bsz, T, H, D)
    alpha = -torch.rand(Bsz, T // Q, Q, H, device="cuda", generator=g).cumsum(2).view(Bsz, T, H) * 0.05
    states, _ = states_forward(k, x, alpha, None, Q, **state_blocks(TUNE))
    dstates, _ = states_backward(q, dy, alpha, None, Q, states.dtype, **state_blocks(TUNE))
    return q, k, x, dy, alpha, states, dstates, g


TRAINING_SHAPE = dict(Bsz=16, T=2048, H=16, M=128, D=64, Q=64)   # the 434M model's micro-batch in the scan (complex N=64 -> M=128)


def rotated_backward_inputs(seed=0):
    "`scan_backward_inputs` at `TRAINING_SHAPE`, then the rotation's cos and sin (B,T,H) of random phases: what 05c's one-kernel backward reads."
    s = TRAINING_SHAPE
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(*s.values(), seed=seed)
    theta = torch.rand(s["Bsz"], s["T"], s["H"], device="cuda", generator=g) * 6.28
    return q, k, x, dy, alpha, states, dstates, theta.cos(), theta.sin()


def pair_scan_inputs(Bsz, T, H=16, N=64, D=64, Q=64, seed=0):
    """The scan's inputs as a training step makes them, with 05a's decay pair: dt (B,T,H) ~ N(0,1), A_re in
    [-1.1, -0.1], A_im ~ N(0,1) (H,), then `phases_forward`'s alpha, alpha_lo, cos, sin, and `rotate_forward`'s bf16 q, k
    (B,T,H,2N) of random B, C, with random bf16 x, dy (B,T,H,D). Returns a dict of those names."""
    from mamba3_lite.ssd.triton.phases import phases_forward, rotate_forward
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)
    dt, A_re, A_im = r(Bsz, T, H), -torch.rand(H, device="cuda", generator=g) - 0.1, r(H)
    alpha, alpha_lo, cos, sin, _ = phases_forward(dt, A_re, A_im, Q)
    q, k = rotate_forward(*(r(Bsz, T, H, N).bfloat16() for _ in range(4)), cos, sin, torch.bfloat16)
    x, dy = r(Bsz, T, H, D).bfloat16(), r(Bsz, T, H, D).bfloat16()
    return dict(dt=dt, A_re=A_re, A_im=A_im, alpha=alpha, alpha_lo=alpha_lo, cos=cos, sin=sin, q=q, k=k, x=x, dy=dy)


def peak_memory_gib(device) -> float | None:
    "Peak allocated CUDA memory since the last reset, in GiB (None on a CPU)."
    device = torch.device(device)
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


def emit(results, device=None, out: str | None = None, echo: bool = True, **extra) -> dict:
    "Wrap `results` with machine, command and date, print it as JSON (unless `echo` is False), and write it to `out` if given."
    record = {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "machine": machine(torch.device(device) if device is not None else None), **extra, "results": results}
    text = json.dumps(record, indent=1)
    if echo: print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    return record


def timed_steps(step, n: int, device) -> list[dict]:
    """`n` calls of `step()`, each one's host start (unix seconds), host ms and return value (`out`); on a GPU also
    `gpu_ms`, the time between CUDA events recorded at each call's start (the GPU work queued in between)."""
    cuda, events, rows = torch.device(device).type == "cuda", [], []
    def mark():
        if cuda: events.append(torch.cuda.Event(enable_timing=True)); events[-1].record()
    for _ in range(n):
        mark(); t0 = time.time(); out = step()
        rows.append({"host_start": t0, "host_ms": 1e3 * (time.time() - t0), "out": out})
    mark(); sync(device)                                # the last call's end
    for r, start, end in zip(rows, events, events[1:]): r["gpu_ms"] = start.elapsed_time(end)
    return rows

class ClockLog:
    """The GPU's SM clock, power and clock-event reasons, sampled by `nvidia-smi` every `every_ms` in the background while
    the `with` block runs (nothing where there is no nvidia-smi). An H200 running a training step sits at its 700 W cap
    (reason 0x4, "SW power cap"), where its SM clock, and so the step time, differs from card to card: a figure from
    one lease names the clock it ran at."""
    def __init__(self, every_ms: int = 50):
        self.every_ms, self.samples, self.proc = every_ms, [], None

    def __enter__(self):
        try:
            reasons = "clocks_event_reasons.active"      # drivers before 535: clocks_throttle_reasons
            if subprocess.run(["nvidia-smi", f"--query-gpu={reasons}", "--format=csv"], capture_output=True).returncode:
                reasons = "clocks_throttle_reasons.active"
            self.path = os.path.join(tempfile.mkdtemp(prefix="clocks_"), "smi.csv")
            self.log = open(self.path, "w")
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,{reasons}",
                                          "--format=csv,noheader,nounits", "-lms", str(self.every_ms)],
                                         stdout=self.log, stderr=subprocess.DEVNULL)
        except OSError: self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is None: return
        self.proc.terminate(); self.proc.wait(); self.log.close()
        for line in open(self.path):
            f = [v.strip() for v in line.split(",")]
            try:
                day, frac = f[0].split(".")
                t = time.mktime(time.strptime(day, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
                self.samples.append((t, float(f[1]), float(f[2]), float(f[3]), f[4]))
            except (ValueError, IndexError): continue

    def between(self, t0: float | None = None, t1: float | None = None) -> dict | None:
        "Mean SM MHz, watts and deg C of the samples in [t0, t1] (unix seconds; all if not given), and their reasons' shares."
        s = [x for x in self.samples if (t0 is None or x[0] >= t0) and (t1 is None or x[0] <= t1)]
        if not s: return None
        reasons = {r: round(sum(x[4] == r for x in s) / len(s), 3) for r in sorted({x[4] for x in s})}
        return {"sm_mhz": round(statistics.mean(x[1] for x in s)), "watts": round(statistics.mean(x[2] for x in s)),
                "deg_c": round(statistics.mean(x[3] for x in s)), "samples": len(s), "reasons": reasons}
