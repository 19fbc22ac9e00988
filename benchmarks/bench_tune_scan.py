"""Launch-parameter sweep of the scan's backward kernels at the 434M model's training shape (B=16, T=2048, H=16,
complex N=64 -> M=128 real, D=64, chunk 64, bf16): `scan_dqdk` (BC, BM, warps, stages) and `scan_dx` (BC, BD, warps,
stages). Each configuration's outputs are compared with the current TUNE's (max |diff| / max |ref|), so a faster
configuration that changes the result is visible. Prints one JSON record; on a CPU it refuses (nothing to tune).

    python benchmarks/bench_tune_scan.py --out benchmarks/results/tune_scan_h200.json
"""
import argparse, itertools, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_tune_scan: needs a CUDA GPU")
    from common import cuda_event_ms as timed, emit, rel_diff as rel, scan_backward_inputs
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    from mamba3_lite.ssd.triton.chunk_scan import scan_dqdk, scan_dx
    Bsz, T, H, M, D, Q = 16, 2048, 16, 128, 64, 64
    q, k, x, dy, alpha, states, dstates, _ = scan_backward_inputs(Bsz, T, H, M, D, Q)
    out = {"shape": dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16"), "current": {k: TUNE[k] for k in TUNE}}
    ref = scan_dqdk(q, k, x, dy, alpha, states, dstates, Q, True, BC=TUNE["BC_dqdk"], BM=TUNE["BM_dqdk"],
                    num_warps=TUNE["warps_dqdk"], num_stages=TUNE["stages"])
    rows = []
    for BC, BM, w, st in itertools.product((16, 32, 64), (64, 128), (4, 8), (1, 2, 3)):
        try:
            fn = lambda: scan_dqdk(q, k, x, dy, alpha, states, dstates, Q, True, BC=BC, BM=BM, num_warps=w, num_stages=st)
            res = fn(); ms = timed(fn)
            rows.append(dict(BC=BC, BM=BM, warps=w, stages=st, ms=round(ms, 4), rel_diff=max(rel(a, b) for a, b in zip(res, ref))))
        except Exception as e:                                              # out of shared memory, etc.
            rows.append(dict(BC=BC, BM=BM, warps=w, stages=st, error=str(e)[:160]))
        print(json.dumps(rows[-1]), flush=True)
    out["dqdk"] = sorted(rows, key=lambda r: r.get("ms", 1e9))
    ref = scan_dx(q, k, dy, alpha, dstates, Q, BC=TUNE["BC"], BD=TUNE["BD_scan"], num_warps=TUNE["warps_dx"], num_stages=TUNE["stages"])
    rows = []
    for BC, BD, w, st in itertools.product((32, 64), (32, 64), (4, 8), (1, 2, 3)):
        try:
            fn = lambda: scan_dx(q, k, dy, alpha, dstates, Q, BC=BC, BD=BD, num_warps=w, num_stages=st)
            res = fn(); ms = timed(fn)
            rows.append(dict(BC=BC, BD=BD, warps=w, stages=st, ms=round(ms, 4), rel_diff=rel(res, ref)))
        except Exception as e:
            rows.append(dict(BC=BC, BD=BD, warps=w, stages=st, error=str(e)[:160]))
        print(json.dumps(rows[-1]), flush=True)
    out["dx"] = sorted(rows, key=lambda r: r.get("ms", 1e9))
    emit(out, device=torch.device("cuda"), out=a.out, benchmark="tune_scan_backward")


if __name__ == "__main__":
    main()
