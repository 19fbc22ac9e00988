"""Launch parameters of chapter 05c's two heaviest kernels, timed as a training step queues them. The forward output
kernel (`scan_y`: rows per block, D tile, warps, stages, register cap) and the one-kernel backward
(`scan_backward_chunk` with the rotation's transpose: warps, stages) were tuned by sweeps that timed one call at a time
between CUDA events (`bench_tune_scan.py`, `bench_kernel_regs.py`, `bench_bwd_chunk.py`), whose rounds spread by up to
15%; `exp_state_tiles.py` found that the state passes' tiles chosen that way were not the fastest once calls were queued
back to back. This sweep re-times these two kernels the queued way (20 calls between two CUDA events, the median of
`--rounds`) at the 434M model's training shape (B=16, T=2048, H=16, complex N=64 -> M=128, D=64, chunk 64, bf16;
`--batch 4 --seq 8192` for the long run's), each result compared with the current launch's (max |diff| / max |ref|).
Prints one JSON record, rows sorted by time. An experiment. (The D tile stays whole, 64: a first run that also tried 32
stopped at an illegal memory access in `scan_y` under triton 3.6 on the H200, which leaves the CUDA context unusable.)

    python benchmarks/exp_scan_tiles.py --out benchmarks/results/scan_tiles_h200.json
"""
import argparse, itertools, statistics, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("exp_scan_tiles: needs a CUDA GPU (it times kernels)")
    from common import TRAINING_SHAPE, emit, queued_ms, rel_diff, scan_backward_inputs
    from mamba3_lite.ssd.triton.phases import device_capability
    from mamba3_lite.ssd.triton.real_ssd import scan_y_blocks, tune_for
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk, scan_y
    s = dict(TRAINING_SHAPE, Bsz=a.batch, T=a.seq)
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(*s.values())
    theta = torch.rand(a.batch, a.seq, s["H"], device="cuda", generator=g) * 6.28
    cos, sin, Q = theta.cos(), theta.sin(), s["Q"]
    tune = tune_for(device_capability(q))
    forms = {
        "scan_y": (lambda **kw: (scan_y(q, k, x, alpha, states, Q, **kw),), scan_y_blocks(tune),
                   [dict(BC=bc, BD=bd, num_warps=w, num_stages=st, maxnreg=r) for bc, bd, w, st, r in
                    itertools.product((32, 64), (64,), (4, 8), (1, 2, 3), (None, 168))]),
        "bwd_chunk": (lambda **kw: [t for t in scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin,
                                                                   torch.bfloat16, end_terms_apart=True, **kw)
                                    for t in (t if isinstance(t, (tuple, list)) else (t,))],
                      dict(num_warps=tune["warps_chunk"], num_stages=tune["stages_chunk"]),
                      [dict(num_warps=w, num_stages=st) for w, st in itertools.product((4, 8), (1, 2))])}
    rows, at_current = [], {}
    for name, (fn, current, grid) in forms.items():
        ref = fn(**current)
        for kw in grid:
            try:
                diff = max(rel_diff(o, r) for o, r in zip(fn(**kw), ref))
                ms = statistics.median(queued_ms(lambda: fn(**kw)) for _ in range(a.rounds))
            except Exception as e:                       # e.g. out of shared memory or registers: say so, go on
                rows.append({"kernel": name, **kw, "error": f"{type(e).__name__}: {str(e)[:160]}"}); continue
            rows.append({"kernel": name, **kw, "ms": round(ms, 4), "rel_diff": diff, "current": kw == current})
        if not any(r.get("current") for r in rows if r["kernel"] == name):   # the current launch off the grid: time it too
            ms = statistics.median(queued_ms(lambda: fn(**current)) for _ in range(a.rounds))
            rows.append({"kernel": name, **current, "ms": round(ms, 4), "rel_diff": 0.0, "current": True})
    ok = sorted((r for r in rows if "ms" in r), key=lambda r: (r["kernel"], r["ms"]))
    best = {n: next(r for r in ok if r["kernel"] == n) for n in forms}
    now = {n: next(r for r in ok if r["kernel"] == n and r["current"]) for n in forms}
    emit({"shape": {**s, "dtype": "bf16"}, "fastest": best, "at_current": now,
          "rows": ok + [r for r in rows if "error" in r]}, device="cuda", out=a.out, benchmark="scan_kernel_tiles")


if __name__ == "__main__":
    main()
