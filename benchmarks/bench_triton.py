#!/usr/bin/env python
"""The chunked SSD scan on the H200: the PyTorch complex reference, the PyTorch real path, and the Triton kernels.
Prints JSON (and writes it with --out).

    python benchmarks/bench_triton.py --out benchmarks/results/triton_h200.json       # CUDA: all sections
    python benchmarks/bench_triton.py --sections methods,sweep                        # a subset
    python benchmarks/bench_triton.py --smoke                                         # CPU + TRITON_INTERPRET: checks the script

Sections (default all, `model` only where mamba3_lite.model exists):
  tune     a few block/warp variants of the Triton kernels at the default shape; the fastest becomes TUNE for the rest
  parity   bf16 Triton vs the fp32 PyTorch real path at the default shape: max |diff| / max |ref| of y and every grad
  methods  forward and forward+backward time (median, benchmarks/common.py's time_fn) and peak memory, B=8 T=2048 H=16
           N=64 (real state 128) D=64 chunk 64: pytorch_complex, pytorch_real, triton, triton_kernels_only
  sweep    chunk_size 32/64/128/256 for pytorch_real and triton: time, memory, max |y - y_pytorch_real|
  profile  CUDA time per kernel of the Triton forward+backward (torch.profiler)
  model    training tokens/s of the default model (bf16 autocast, B=16, T=2048, eager) with ssd_dispatch pytorch vs
           triton (ENABLE_TRITON_KERNELS=1), through benchmarks/bench_model.py's training step
Peak memory is torch.cuda.max_memory_allocated during the call minus what was allocated before it (inputs included
before, so it is the call's own working set: saved activations for the forward, everything for forward+backward).
Runs against the installed package; the JSON is benchmarks/common.py's `emit` format (command, date, machine, results).
"""
import argparse
import os
import sys
import time
import traceback

import torch

if not torch.cuda.is_available():                                      # no CUDA: --smoke on the Triton interpreter,
    os.environ.setdefault("TRITON_INTERPRET", "1")                     # set before the kernels are defined

from mamba3_lite.ssd.chunk import (chunk_log_decays_and_phases, real_ssd_chunked, rotate_bc, ssd_complex_chunkwise,
                                   ssd_real_chunkwise)
from mamba3_lite.ssd.triton import real_ssd
from common import emit, sync, time_fn                                 # benchmarks/common.py


def log(*a):
    print("#", *a, file=sys.stderr, flush=True)


def make_inputs(B, T, H, N, D, device, dtype=torch.bfloat16, seed=0):
    "bf16 activations as the model's in_proj gives them under autocast; A fp32 (a parameter). Random, never zeros."
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(B, T, H, D, generator=g)
    BC = [torch.randn(B, T, H, N, generator=g) / N ** 0.5 for _ in range(4)]
    dt = torch.randn(B, T, H, generator=g) - 1.0                        # softplus(dt) ~ 0.3: the model's range
    A_re = -torch.exp(torch.linspace(-2, 1.5, H))                      # decays spread over heads
    A_im = torch.linspace(0.001, 1.0, H)                               # phases spread over heads
    acts = [t.to(device=device, dtype=dtype) for t in (x, *BC, dt)]
    return dict(x=acts[0], A_re=A_re.to(device), A_im=A_im.to(device), B_re=acts[1], B_im=acts[2], C_re=acts[3],
                C_im=acts[4], dt=acts[5])


def real_args(inp):
    return [inp[k] for k in ("x", "A_re", "A_im", "B_re", "B_im", "C_re", "C_im", "dt")]


def kernels_only(inp, Q):
    """The fused scan alone on pre-rotated q, k (bf16) and fp32 decays, the piece comparable to the official kernel:
    (forward, forward+backward) through the public launchers `scan_forward` / `scan_backward` (no autograd)."""
    with torch.no_grad():
        args = real_args(inp)
        Bsz, T, H, D = args[0].shape
        alpha, theta, _ = chunk_log_decays_and_phases(args[7], args[1], args[2], Q)
        nc = alpha.shape[1]
        ch = [t.float().reshape(Bsz, nc, Q, H, -1) for t in args[3:7]]
        q, k = (t.to(args[0].dtype).reshape(Bsz, nc * Q, H, -1) for t in rotate_bc(*ch, theta))
        x, alpha = args[0].contiguous(), alpha.reshape(Bsz, nc * Q, H).contiguous()
    fwd = lambda: real_ssd.scan_forward(q, k, x, alpha, None, Q)[0]
    gy = torch.randn_like(fwd())

    def fwdbwd():
        fwd()
        return real_ssd.scan_backward(q, k, x, alpha, None, Q, gy, None)
    return fwd, fwdbwd


def build(method, inp, Q):
    "(callable producing the output tensor, callable running forward and backward) for one method."
    if method == "triton_kernels_only":
        return kernels_only(inp, Q)
    if method in ("pytorch_real", "triton"):
        leaves = [t.detach().clone().requires_grad_() for t in real_args(inp)]
        fn = ssd_real_chunkwise if method == "pytorch_real" else real_ssd.ssd_real_chunkwise_triton
        fwd = lambda: fn(*leaves, chunk_size=Q)
    elif method == "pytorch_complex":
        x = inp["x"].float()
        A = torch.complex(inp["A_re"], inp["A_im"])
        B_t = torch.complex(inp["B_re"].float(), inp["B_im"].float())
        C_t = torch.complex(inp["C_re"].float(), inp["C_im"].float())
        leaves = [t.detach().clone().requires_grad_() for t in (x, A, B_t, C_t, inp["dt"].float())]
        fwd = lambda: ssd_complex_chunkwise(*leaves, chunk_size=Q)
    else:
        raise ValueError(method)
    gy = torch.randn_like(fwd())
    return fwd, (lambda: torch.autograd.grad(fwd(), leaves, gy))


def bench_ms(fn, dev, iters, warmup):
    "Median wall time of fn() in ms: benchmarks/common.py's time_fn (synchronised around every call)."
    return time_fn(fn, dev, warmup=warmup, iters=iters)["median_s"] * 1e3


def peak_mib(fn, dev):
    if dev.type != "cuda":
        fn(); return None
    sync(dev); torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    sync(dev)
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2 ** 20


def measure(method, inp, Q, dev, iters, warmup):
    fwd, fwdbwd = build(method, inp, Q)
    res = {"name": method, "chunk_size": Q}
    res["fwd_ms"] = bench_ms(fwd, dev, iters, warmup)
    res["fwdbwd_ms"] = bench_ms(fwdbwd, dev, iters, warmup)
    res["fwd_peak_mib"] = peak_mib(fwd, dev)
    res["fwdbwd_peak_mib"] = peak_mib(fwdbwd, dev)
    return res


def rel_maxdiff(a, b):
    a, b = (torch.view_as_real(t) if t.is_complex() else t for t in (a, b))
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()


def qk_rounded_core(q, k, xc, alpha, S0):
    "`real_ssd_chunked` with only the rotated q, k rounded to bf16 (straight through): the fp32 path's bf16 band."
    q, k = (t + (t.bfloat16().float() - t).detach() for t in (q, k))
    return real_ssd_chunked(q, k, xc, alpha, S0)


def parity(inp, Q):
    """bf16 Triton vs the fp32 PyTorch real path on the same (bf16-rounded) values: max |diff| / max |ref| of y, the
    final state and every gradient; `band_*`: the same for the fp32 path with only q, k rounded to bf16."""
    bf = [t.detach().clone().requires_grad_() for t in real_args(inp)]
    fp = [t.detach().float().requires_grad_() for t in real_args(inp)]
    rn = [t.detach().float().requires_grad_() for t in real_args(inp)]
    Bsz, T, H, D = bf[0].shape
    N = bf[3].shape[-1]
    s0 = (torch.randn(Bsz, H, N, D, dtype=torch.complex64, device=bf[0].device) * 0.1).requires_grad_()
    s0r, s0n = (s0.detach().clone().requires_grad_() for _ in range(2))
    y, sf = real_ssd.ssd_real_chunkwise_triton(*bf, chunk_size=Q, initial_state=s0, return_final_state=True)
    yr, sfr = ssd_real_chunkwise(*fp, chunk_size=Q, initial_state=s0r, return_final_state=True)
    yn, sfn = ssd_real_chunkwise(*rn, chunk_size=Q, initial_state=s0n, return_final_state=True, core=qk_rounded_core)
    out = {"y": rel_maxdiff(y, yr), "final_state": rel_maxdiff(sf, sfr), "y_finite": bool(torch.isfinite(y).all())}
    gy, gs = torch.randn_like(yr), torch.randn_like(sfr)
    g = torch.autograd.grad((y.float() * gy).sum() + (sf * gs.conj()).real.sum(), bf + [s0])
    gr = torch.autograd.grad((yr * gy).sum() + (sfr * gs.conj()).real.sum(), fp + [s0r])
    gn = torch.autograd.grad((yn * gy).sum() + (sfn * gs.conj()).real.sum(), rn + [s0n])
    for a, b, c, n in zip(g, gr, gn, "x A_re A_im B_re B_im C_re C_im dt initial_state".split()):
        out["d" + n] = rel_maxdiff(a, b)
        out["band_d" + n] = rel_maxdiff(c, b)
    return out


def tune(inp, Q, dev, iters, warmup):
    """Block/warp variants of the Triton path, ranked by GPU kernel time of one forward+backward (torch.profiler, immune
    to the host's launch jitter); each knob's alternative against the defaults, then the winners together."""
    base = dict(real_ssd.TUNE)
    alts = [dict(BC_dqdk=64, warps_dqdk=8, BM_dqdk=64), dict(BM_dqdk=64), dict(BM_state=32), dict(warps_state=8),
            dict(warps_scan=8, warps_dx=8)]
    rows = []

    def trial(label, cfg):
        real_ssd.TUNE.clear(); real_ssd.TUNE.update(cfg)
        try:
            prof = profile_triton(inp, Q, iters=3)
            rows.append({"variant": label, "tune": dict(cfg), "gpu_us": prof["device_us_per_iter"],
                         "wall_ms": bench_ms(build("triton", inp, Q)[1], dev, iters, warmup),
                         "top_kernels": {k["name"]: round(k["device_us_per_iter"], 1) for k in prof["kernels"][:8]}})
        except Exception as e:                                         # a variant that does not compile is reported
            rows.append({"variant": label, "tune": dict(cfg), "error": f"{type(e).__name__}: {e}"[:300]})
        log(rows[-1])
        return rows[-1].get("gpu_us", float("inf"))

    t0 = trial("defaults", base)
    winners = {}
    for a in alts:
        if trial(a, {**base, **a}) < 0.97 * t0:
            winners.update(a)
    if winners and winners not in alts:
        trial({"combined": winners}, {**base, **winners})
    best = min((r for r in rows if "gpu_us" in r), key=lambda r: r["gpu_us"])
    real_ssd.TUNE.clear(); real_ssd.TUNE.update(best["tune"])
    return {"rows": rows, "chosen": best["tune"]}


def profile_triton(inp, Q, iters=5, backward=True, method="triton"):
    """GPU time per kernel of a method's (default: the Triton path's) forward+backward (torch.profiler self device time, so nothing is
    counted twice), their sum per iteration, and the host wall time per iteration under the profiler."""
    from torch.profiler import ProfilerActivity, profile
    fwd, fwdbwd = build(method, inp, Q)
    step = fwdbwd if backward else fwd
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / iters
    rows = []
    for e in prof.key_averages():
        dt = getattr(e, "self_device_time_total", None)
        dt = getattr(e, "self_cuda_time_total", 0) if dt is None else dt
        if dt and dt > 0 and e.self_cpu_time_total == 0:           # device-side kernel rows only: nothing counted twice
            rows.append({"name": e.key[:90], "calls_per_iter": e.count / iters, "device_us_per_iter": dt / iters})
    rows.sort(key=lambda r: -r["device_us_per_iter"])
    return {"wall_ms_per_iter_profiled": wall * 1e3, "kernels": rows[:25],
            "device_us_per_iter": sum(r["device_us_per_iter"] for r in rows)}


# (ssd_dispatch, grad_checkpoint); the plain PyTorch path does not fit B=16 T=2048 on the H200 without checkpointing
MODEL_RUNS = [("pytorch", False), ("pytorch", True), ("triton", False), ("triton", True)]


def model_throughput(dev, batch, seq, steps, warmup):
    try:
        from mamba3_lite.model import ModelConfig                      # chapter 04
    except Exception as e:
        return [{"error": f"mamba3_lite.model not importable: {type(e).__name__}: {e}"}]
    import bench_model                                                 # benchmarks/ is on sys.path (the script's folder)
    args = argparse.Namespace(batch=batch, seq=seq, steps=steps, warmup=warmup, dtype="bf16")
    out = []
    for dispatch, ckpt in MODEL_RUNS:
        os.environ["ENABLE_TRITON_KERNELS"] = "1" if dispatch == "triton" else "0"
        try:
            cfg = ModelConfig(ssd_dispatch=dispatch, grad_checkpoint=ckpt)
            r = bench_model.run_mode(cfg, "eager", args, dev)
        except torch.OutOfMemoryError as e:
            r = {"mode": "eager", "error": "out of memory: " + str(e).splitlines()[0]}
        except Exception as e:
            r = {"mode": "eager", "error": f"{type(e).__name__}: {e}"[:400], "trace": traceback.format_exc()[-1500:]}
        r["ssd_dispatch"], r["grad_checkpoint"] = dispatch, ckpt
        out.append(r)
        log("model", r)
        torch.cuda.empty_cache()
    os.environ.pop("ENABLE_TRITON_KERNELS", None)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="tune,parity,methods,sweep,profile,model")
    p.add_argument("--model-runs", default=None, help="e.g. pytorch:1,triton:0 (dispatch:grad_checkpoint)")
    p.add_argument("--out", default=None)
    p.add_argument("--iters", type=int, default=20, help="timed calls per measurement (median)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--model-steps", type=int, default=6)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type != "cuda" and not args.smoke:
        log("no CUDA: running --smoke (tiny shapes on the Triton interpreter)")
        args.smoke = True
    if args.smoke:
        B, T, H, N, D, Q, chunks = 1, 64, 2, 8, 16, 16, (16, 32)
    else:
        B, T, H, N, D, Q, chunks = 8, 2048, 16, 64, 64, 64, (32, 64, 128, 256)
    sections = args.sections.split(",")
    iters, warmup = (2, 1) if args.smoke else (args.iters, args.warmup)
    report = {}                                                        # the sections; emit() adds command, date, machine
                                                                       # progress goes to stderr (log); JSON once, at the end

    inp = make_inputs(B, T, H, N, D, dev, dtype=torch.float32 if args.smoke else torch.bfloat16)   # interpreter: no bf16 dot
    if "tune" in sections and not args.smoke:
        log("tune"); report["tune"] = tune(inp, Q, dev, iters, warmup); log(report["tune"]["chosen"])
    report["tune_used"] = dict(real_ssd.TUNE)
    if "parity" in sections:
        log("parity"); report["gpu_parity" if dev.type == "cuda" else "parity"] = parity(inp, Q)
        log(report.get("gpu_parity", report.get("parity")))
    if "methods" in sections:
        report["methods"] = []
        for mth in ("pytorch_complex", "pytorch_real", "triton", "triton_kernels_only"):
            try:
                r = measure(mth, inp, Q, dev, iters, warmup)
                if dev.type == "cuda":
                    r["gpu_us_fwd"] = profile_triton(inp, Q, iters=3, backward=False, method=mth)["device_us_per_iter"]
                    r["gpu_us_fwdbwd"] = profile_triton(inp, Q, iters=3, method=mth)["device_us_per_iter"]
            except torch.OutOfMemoryError as e:
                r = {"name": mth, "error": "out of memory: " + str(e).splitlines()[0]}
            except Exception as e:
                r = {"name": mth, "error": f"{type(e).__name__}: {e}"[:400], "trace": traceback.format_exc()[-1500:]}
            report["methods"].append(r); log(r)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    if "sweep" in sections:
        report["chunk_sweep"] = []
        for q in chunks:
            ref_y = None
            for mth in ("pytorch_real", "triton"):
                try:
                    r = measure(mth, inp, q, dev, iters, warmup)
                    r["method"] = r.pop("name")
                    if dev.type == "cuda":                             # GPU kernel time: immune to launch jitter
                        r["gpu_us_fwd"] = profile_triton(inp, q, iters=3, backward=False, method=mth)["device_us_per_iter"]
                        r["gpu_us_fwdbwd"] = profile_triton(inp, q, iters=3, method=mth)["device_us_per_iter"]
                    with torch.no_grad():
                        y = build(mth, inp, q)[0]().float()
                    if mth == "pytorch_real":
                        ref_y = y
                    elif ref_y is not None:
                        r["y_maxdiff"] = (y - ref_y).abs().max().item()
                        r["y_maxdiff_rel"] = r["y_maxdiff"] / ref_y.abs().max().item()
                    del y
                except torch.OutOfMemoryError as e:
                    r = {"method": mth, "chunk_size": q, "error": "out of memory: " + str(e).splitlines()[0]}
                except Exception as e:
                    r = {"method": mth, "chunk_size": q, "error": f"{type(e).__name__}: {e}"[:400]}
                report["chunk_sweep"].append(r); log(r)
            ref_y = None
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    if "profile" in sections and dev.type == "cuda":
        log("profile"); report["profile"] = profile_triton(inp, Q)
        report["profile_forward"] = profile_triton(inp, Q, backward=False)
        log({k: report[k]["device_us_per_iter"] for k in ("profile", "profile_forward")})
    if "model" in sections and dev.type == "cuda":
        if args.model_runs:
            MODEL_RUNS[:] = [(d, bool(int(c))) for d, c in (r.split(":") for r in args.model_runs.split(","))]
        del inp
        torch.cuda.empty_cache()
        report["model"] = model_throughput(dev, 16, 2048, args.model_steps, 2)
    return emit(report, device=dev, out=args.out, benchmark="ssd_scan",
                shape=dict(B=B, T=T, H=H, N_complex=N, state_real=2 * N, D=D, chunk_size=Q,
                           dtype="fp32 inputs (interpreter)" if args.smoke else "bf16 inputs"),
                reference_official_mamba3_siso_ms={"fwd": 1.16, "fwdbwd": 2.51, "source": "state-spaces/mamba SISO Triton kernels on an H200, 2026-12-01; a peer figure, not measured by this script"})


if __name__ == "__main__":
    main()
