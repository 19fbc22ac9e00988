"""The scan's backward after the reverse state pass, two ways, at the 434M model's training shape (B=16, T=2048, H=16,
complex N=64 -> M=128, D=64, chunk 64, bf16): chapter 05c's two kernels (`scan_dx`, `scan_dqdk` with the phase
gradient) followed by 05a's `rotate_backward`, against 05c's one-kernel `scan_backward_chunk` (the rotation's transpose
in registers), with dx in the same kernel or by `scan_dx`, over warps and pipeline stages. GPU time per call from CUDA
events (median of 20); every variant's outputs against the two-kernel path's (max |diff| / max |ref|). Prints one JSON
record; on a CPU it refuses (nothing to time).

    python benchmarks/bench_bwd_chunk.py --out benchmarks/results/bwd_chunk_h200.json
"""
import argparse, itertools, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_bwd_chunk: needs a CUDA GPU")
    from common import cuda_event_ms as timed, emit, rel_diff as rel, scan_backward_inputs
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    from mamba3_lite.ssd.triton.phases import rotate_backward
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk, scan_dqdk, scan_dx
    Bsz, T, H, M, D, Q = a.batch, a.seq, 16, 128, 64, 64
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(Bsz, T, H, M, D, Q)
    theta = torch.rand(Bsz, T, H, device="cuda", generator=g) * 6.28
    cos, sin = theta.cos(), theta.sin()

    def two_kernels():
        dx = scan_dx(q, k, dy, alpha, dstates, Q, BC=TUNE["BC"], BD=TUNE["BD_scan"], num_warps=TUNE["warps_dx"],
                     num_stages=TUNE["stages"])
        dq, dk, dalpha, dth = scan_dqdk(q, k, x, dy, alpha, states, dstates, Q, True, BC=TUNE["BC_dqdk"],
                                        BM=TUNE["BM_dqdk"], num_warps=TUNE["warps_dqdk"], num_stages=TUNE["stages_dqdk"])
        return (*rotate_backward(cos, sin, dq, dk, [torch.bfloat16] * 4, block_rows=TUNE["BR_rot"]), dx, dalpha, dth)

    def one_kernel(with_dx, w, st):
        def fn():
            bc, dx, dalpha, dth = scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                                      with_dx=with_dx, num_warps=w, num_stages=st)
            if dx is None:
                dx = scan_dx(q, k, dy, alpha, dstates, Q, BC=TUNE["BC"], BD=TUNE["BD_scan"],
                             num_warps=TUNE["warps_dx"], num_stages=TUNE["stages"])
            return (*bc, dx, dalpha, dth)
        return fn

    names = ("dB_re", "dB_im", "dC_re", "dC_im", "dx", "dalpha", "dtheta")
    ref = two_kernels()
    rows = [dict(path="two kernels + rotate_backward (TUNE)", ms=round(timed(two_kernels), 4))]
    print(json.dumps(rows[-1]), flush=True)
    for with_dx, w, st in itertools.product((True, False), (4, 8), (1, 2, 3)):
        row = dict(path=f"one kernel{'' if with_dx else ' + scan_dx'}", warps=w, stages=st)
        try:
            fn = one_kernel(with_dx, w, st)
            res = fn(); row["ms"] = round(timed(fn), 4)
            row["rel_diff"] = {n: float(f"{rel(u, v):.2e}") for n, u, v in zip(names, res, ref)}
        except Exception as e:                                             # out of registers / shared memory
            row["error"] = str(e)[:200]
        rows.append(row); print(json.dumps(row), flush=True)
    out = {"shape": dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16"), "tune": dict(TUNE),
           "paths": sorted(rows, key=lambda r: r.get("ms", 1e9))}
    emit(out, device=torch.device("cuda"), out=a.out, benchmark="bwd_chunk")


if __name__ == "__main__":
    main()
