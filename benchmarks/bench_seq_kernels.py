"""The SSD's sequential kernels at the 434M model's two training shapes (B=16 T=2048 and B=4 T=8192; H=16, complex
N=64 -> M=128, D=64, chunk 64, bf16): 05a's phase kernels (`phases_forward`/`phases_backward`) one chunk per loop step
(CB=1, the first version) against a tile of chunks (`chunks_per_tile`), and 05b's state passes (`states_forward`,
`states_backward`) over their block sizes, warps and pipeline stages. dt and x are strided slices of an in_proj-shaped
tensor, as in the model. GPU time per call from CUDA events (median of 20); each variant's outputs against the default
launch's (max |diff| / max |ref|). Prints one JSON record; on a CPU it refuses (nothing to time).

    python benchmarks/bench_seq_kernels.py --out benchmarks/results/seq_kernels_h200.json
"""
import argparse, itertools, json, sys

import torch


def phase_rows(Bsz, T, H, Q, proj, timed, rel):
    from mamba3_lite.ssd.triton.phases import chunks_per_tile, phases_backward, phases_forward
    g = torch.Generator(device="cuda").manual_seed(1)
    dt = proj[..., -H:]                                                     # (B, T, H), row stride of the projection
    A_re, A_im = -torch.rand(H, device="cuda", generator=g) - 0.1, torch.randn(H, device="cuda", generator=g)
    NC = -(-T // Q)
    dalpha, dtheta = (torch.randn(Bsz, NC * Q, H, device="cuda", generator=g) for _ in range(2))
    dth_end = torch.randn(Bsz, H, device="cuda", generator=g)
    ref_f = phases_forward(dt, A_re, A_im, Q)
    ref_b = phases_backward(dt, A_re, A_im, dalpha, dtheta, dth_end, Q)
    rows = []
    for CB in (1, 4, chunks_per_tile(Q), 2 * chunks_per_tile(Q)):
        f = lambda: phases_forward(dt, A_re, A_im, Q, CB=CB)
        b = lambda: phases_backward(dt, A_re, A_im, dalpha, dtheta, dth_end, Q, CB=CB)
        rows.append(dict(kernel="phases", CB=CB, fwd_ms=round(timed(f), 4), bwd_ms=round(timed(b), 4),
                         rel_diff=max(max(rel(u, v) for u, v in zip(f(), ref_f)), max(rel(u, v) for u, v in zip(b(), ref_b)))))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def state_rows(Bsz, T, H, M, D, Q, proj, timed, rel):
    from mamba3_lite.ssd.triton.chunk_state import states_backward, states_forward
    g = torch.Generator(device="cuda").manual_seed(2)
    x = proj[..., :H * D].unflatten(-1, (H, D))                              # (B, T, H, D) strided, as the model's
    k, q = (torch.randn(Bsz, T, H, M, device="cuda", generator=g).bfloat16() for _ in range(2))
    dy = torch.randn(Bsz, T, H, D, device="cuda", generator=g).bfloat16()
    alpha = -torch.rand(Bsz, T // Q, Q, H, device="cuda", generator=g).cumsum(2).view(Bsz, T, H) * 0.05
    ref_f = states_forward(k, x, alpha, None, Q)
    ref_b = states_backward(q, dy, alpha, None, Q, torch.bfloat16)
    rows = []
    for BM, BD, w, st in itertools.product((64, 32), (64, 32), (4, 2), (2, 3)):
        kw = dict(BM=BM, BD=BD, num_warps=w, num_stages=st)
        f = lambda: states_forward(k, x, alpha, None, Q, **kw)
        b = lambda: states_backward(q, dy, alpha, None, Q, torch.bfloat16, **kw)
        row = dict(kernel="states", **kw)
        try:
            row.update(fwd_ms=round(timed(f), 4), bwd_ms=round(timed(b), 4),
                       rel_diff=max(max(rel(u, v) for u, v in zip(f(), ref_f)), max(rel(u, v) for u, v in zip(b(), ref_b))))
        except Exception as e:                                             # out of registers / shared memory
            row["error"] = str(e)[:200]
        rows.append(row); print(json.dumps(row), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_seq_kernels: needs a CUDA GPU")
    from common import cuda_event_ms as timed, emit, rel_diff as rel
    H, M, D, N, Q = 16, 128, 64, 64, 64
    out = []
    for Bsz, T in ((16, 2048), (4, 8192)):
        proj = torch.randn(Bsz, T, H * (D + 4 * N + 1) + 48, device="cuda").bfloat16()[..., :H * (D + 4 * N + 1)]
        rows = phase_rows(Bsz, T, H, Q, proj, timed, rel) + state_rows(Bsz, T, H, M, D, Q, proj, timed, rel)
        out.append({"shape": dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16"), "rows": rows})
        del proj
    emit(out, device=torch.device("cuda"), out=a.out, benchmark="ssd_sequential_kernels")


if __name__ == "__main__":
    main()
