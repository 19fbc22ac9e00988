"""The forward's rotation and state pass, two ways, at the 434M model's training shape (B=16, T=2048, H=16, complex
N=64 -> M=128, D=64, chunk 64, bf16, B and C read as strided slices of one (B, T, H(D+4N+1)) projection as the model
hands them over): 05a's `rotate_forward` then 05b's `states_forward` (the state tiles the package launches at this
shape on this GPU: 05d's `state_blocks` over the B*H pairs), against 05b's
`rotate_states_forward` (the rotation inside the state pass) over state tiles, warps and pipeline stages. GPU time per
call with 20 calls queued back to back (`common.queued_ms`, as a training step queues them); every variant's q, k,
states and final state compared with the two-kernel path's (bit for bit, and the largest difference). Prints one JSON record; on a CPU it refuses.

    python benchmarks/bench_rotate_state.py --out benchmarks/results/rotate_state_h200.json
"""
import argparse, itertools, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_rotate_state: needs a CUDA GPU")
    from common import emit, queued_ms
    from mamba3_lite.ssd.triton.real_ssd import state_blocks, tune_for
    from mamba3_lite.ssd.triton.phases import device_capability, rotate_forward
    from mamba3_lite.ssd.triton.chunk_state import rotate_states_forward, states_forward
    Bsz, T, H, N, D, Q = a.batch, a.seq, 16, 64, 64, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    proj = torch.randn(Bsz, T, H * (D + 4 * N) + H, device="cuda", generator=g).bfloat16()
    x = proj[..., :H * D].view(Bsz, T, H, D)
    bc = [proj[..., H * (D + i * N):H * (D + (i + 1) * N)].view(Bsz, T, H, N) for i in range(4)]
    alpha = -torch.rand(Bsz, T // Q, Q, H, device="cuda", generator=g).cumsum(2).view(Bsz, T, H) * 0.05
    theta = torch.rand(Bsz, T, H, device="cuda", generator=g) * 6.28
    cos, sin = theta.cos(), theta.sin()
    TUNE = tune_for(device_capability(x))
    blocks = state_blocks(TUNE, Bsz * H)                                   # what the package launches here

    def two_kernels():
        q, k = rotate_forward(*bc, cos, sin, x.dtype, block_rows=TUNE["BR_rot"])
        return (q, k, *states_forward(k, x, alpha, None, Q, **blocks))

    names = ("q", "k", "states", "final state")
    ref = two_kernels()
    rows = [dict(path="rotate_forward + states_forward (the package's launch)", **blocks, ms=round(queued_ms(two_kernels), 4))]
    rows.append(dict(path="  of it, rotate_forward", ms=round(queued_ms(lambda: rotate_forward(*bc, cos, sin, x.dtype)), 4)))
    for row in rows: print(json.dumps(row), flush=True)
    for bm, w, st in itertools.product((32, 64), (4, 8), (2, 3)):
        row = dict(path="rotate_states_forward", BM=bm, BD=64, warps=w, stages=st)
        try:
            fn = lambda: rotate_states_forward(*bc, cos, sin, x, alpha, None, Q, BM=bm, BD=64, num_warps=w, num_stages=st)
            res = fn(); row["ms"] = round(queued_ms(fn), 4)
            row["bit_equal"] = {n: bool(torch.equal(u, v)) for n, u, v in zip(names, res, ref)}
            row["max_abs_diff"] = {n: (u.float() - v.float()).abs().max().item() for n, u, v in zip(names, res, ref)}
        except Exception as e:                                             # out of registers / shared memory
            row["error"] = str(e)[:200]
        rows.append(row); print(json.dumps(row), flush=True)
    out = {"shape": dict(B=Bsz, T=T, H=H, N=N, D=D, Q=Q, dtype="bf16", bc="strided slices of the projection"),
           "tune": dict(TUNE), "paths": sorted(rows, key=lambda r: r.get("ms", 1e9))}
    emit(out, device=torch.device("cuda"), out=a.out, benchmark="rotate_state")


if __name__ == "__main__":
    main()
