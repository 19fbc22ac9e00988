#!/usr/bin/env python
"""Time the three SSD paths: the naive O(T) complex scan (chapter 01), the complex chunkwise algorithm and the
real-arithmetic chunkwise path the model runs on (chapter 02); forward and forward+backward. Prints JSON.

    python benchmarks/bench_ssd.py                                  # CPU: B=2, T=2048, H=16, D=64, N=64
    python benchmarks/bench_ssd.py --device cuda --batch 8          # the H200 run

The naive scan is a Python loop over T (one step per token, and its backward holds every step's state). It is
timed once, without warm-up, at --naive-seq (default: T on CUDA, min(T, 256) on CPU, where T=2048 takes minutes);
the JSON gives that T and a linear extrapolation to the full T, labelled as such. `--naive-seq 0` skips it.
Timing is benchmarks/common.py's `time_fn` (median and min of synchronised wall times); the JSON is its `emit` format.
"""
import argparse
import os
import sys

import torch

from mamba3_lite.ssd.chunk import ssd_complex_chunkwise, ssd_real_chunkwise
from mamba3_lite.ssd.naive import ssd_naive_complex
from common import emit, time_fn                                              # benchmarks/common.py


def make_inputs(B, T, H, D, N, device, seed=0):
    "Leaf tensors (fp32, requires_grad): x, B/C real and imaginary parts, dt, and A as (Re, Im) with a spread of decays and phases."
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    A_re = -torch.logspace(-3, 0, H)                                   # decays from slow to fast
    A_im = torch.logspace(-3, 0.5, H)                                  # phases from slow to fast
    leaves = dict(x=r(B, T, H, D), B_re=r(B, T, H, N) / N ** 0.5, B_im=r(B, T, H, N) / N ** 0.5,
                  C_re=r(B, T, H, N) / N ** 0.5, C_im=r(B, T, H, N) / N ** 0.5, dt=r(B, T, H) - 2.0, A_re=A_re, A_im=A_im)
    return {k: v.to(device).requires_grad_(True) for k, v in leaves.items()}


def path_fns(chunk_size):
    "Each path maps the same real leaves to the real output (B, T, H, D) fp32."
    def naive(t):
        A = torch.complex(t["A_re"], t["A_im"])
        return ssd_naive_complex(t["x"], A, torch.complex(t["B_re"], t["B_im"]), torch.complex(t["C_re"], t["C_im"]), t["dt"]).real

    def complex_chunkwise(t):
        A = torch.complex(t["A_re"], t["A_im"])
        return ssd_complex_chunkwise(t["x"], A, torch.complex(t["B_re"], t["B_im"]), torch.complex(t["C_re"], t["C_im"]),
                                     t["dt"], chunk_size=chunk_size)

    def real_chunkwise(t):
        return ssd_real_chunkwise(t["x"], t["A_re"], t["A_im"], t["B_re"], t["B_im"], t["C_re"], t["C_im"], t["dt"],
                                  chunk_size=chunk_size)
    return {"naive": naive, "complex_chunkwise": complex_chunkwise, "real_chunkwise": real_chunkwise}


def bench_path(fn, inputs, device, warmup, repeats):
    gy = torch.randn_like(fn(inputs).detach())

    def fwd():
        with torch.no_grad():
            fn(inputs)

    def fwd_bwd():
        for v in inputs.values():
            v.grad = None
        fn(inputs).backward(gy)

    out = {}
    for name, f in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        t = time_fn(f, device, warmup=warmup, iters=repeats)
        out[f"{name}_ms"] = round(t["median_s"] * 1e3, 3)
        out[f"{name}_ms_min"] = round(t["min_s"] * 1e3, 3)
        if device.type == "cuda":
            out[f"{name}_peak_extra_mib"] = round((torch.cuda.max_memory_allocated(device) - base) / 2 ** 20, 1)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--state-dim", type=int, default=64)
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--warmup", type=int, default=None, help="default: 1 on CPU, 3 on CUDA")
    p.add_argument("--repeats", type=int, default=None, help="default: 3 on CPU, 10 on CUDA")
    p.add_argument("--naive-seq", type=int, default=None, help="T for the naive scan (timed once); default T on CUDA, min(T, 256) on CPU; 0 skips it")
    p.add_argument("--paths", default="naive,complex_chunkwise,real_chunkwise")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    repeats = args.repeats if args.repeats is not None else (10 if cuda else 3)
    naive_T = args.naive_seq if args.naive_seq is not None else (args.seq if cuda else min(args.seq, 256))
    B, T, H, D, N, Q = args.batch, args.seq, args.heads, args.head_dim, args.state_dim, args.chunk
    fns = path_fns(Q)

    report = {
        "shape": dict(B=B, T=T, H=H, D=D, N=N, chunk=Q, dtype="float32 in, fp32/complex64 inside"),
        "timing": f"median of {repeats} after {warmup} warm-up (naive: 1 run, no warm-up)",
        "cpu_count": os.cpu_count(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "results": {},
    }
    inputs = make_inputs(B, T, H, D, N, device)
    for name in args.paths.split(","):
        if name == "naive":
            if naive_T <= 0:
                continue
            small = make_inputs(B, naive_T, H, D, N, device)
            res = bench_path(fns["naive"], small, device, warmup=0, repeats=1)
            res["T"] = naive_T
            res["note"] = "O(T) Python loop, timed once without warm-up" + ("" if naive_T == T else f" at T={naive_T}")
            if naive_T != T:
                for k in ("fwd", "fwd_bwd"):
                    res[f"{k}_ms_extrapolated_to_T{T}"] = round(res[f"{k}_ms"] * T / naive_T, 1)
        else:
            res = bench_path(fns[name], inputs, device, warmup, repeats)
        report["results"][name] = res
        print(f"# {name}: {res}", file=sys.stderr, flush=True)

    # a correctness cross-check at the benchmark shape (cheap): real vs complex chunkwise outputs
    with torch.no_grad():
        y_c, y_r = fns["complex_chunkwise"](inputs), fns["real_chunkwise"](inputs)
        report["check"] = {"max_abs_diff_real_vs_complex": (y_r - y_c).abs().max().item(), "max_abs_output": y_c.abs().max().item()}
    r = report["results"]
    if "complex_chunkwise" in r and "real_chunkwise" in r:
        report["speedup_real_over_complex"] = {k: round(r["complex_chunkwise"][f"{k}_ms"] / r["real_chunkwise"][f"{k}_ms"], 2)
                                               for k in ("fwd", "fwd_bwd")}
    results = report.pop("results")
    return emit(results, device=device, out=args.out, benchmark="ssd_paths", **report)


if __name__ == "__main__":
    main()
