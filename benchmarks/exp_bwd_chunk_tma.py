"""Chapter 05c's one-kernel backward with its tiles moved by Hopper's TMA? An experiment, not a kernel of the package.

`bwd_chunk_kernel` (one program per batch, chunk and head) loads ten 64x64 bf16 tiles (x, dy, both halves of q, k, of
the chunk's state S and of its gradient G) through registers: at 255 registers a thread only two programs fit on an SM,
and its loads do not overlap its fourteen 64x64x64 products (0.43 ms a call against 0.27 for its traffic alone,
`bwd_chunk_floor_h200.json`). `tma_chunk_kernel` below is the same arithmetic in the same order, but every tile comes
in through a tensor descriptor (`triton.tools.tensor_descriptor.TensorDescriptor`: the copy engine writes the tile
into shared memory, in the layout the tensor cores read, without a register or an address computed per element) and,
with `TMA_STORE`, the five gradient tiles go out the same way. Out-of-range steps (T not a multiple of the chunk) read
as zeros and are not written, as the masks do in the real kernel.

On the GPU: the real kernel at the package's launch against the TMA kernel at 4 and 8 warps, with and without TMA
stores, at the 434M model's training shape, interleaved rounds of 20 queued calls; each row's outputs against the real
kernel's (largest relative difference) and its compiled registers, spills and shared memory. On a CPU (`--check`):
the two kernels on Triton's interpreter in fp32 at T = 88 (five and a half chunks of 16); prints the largest differences.

Result (one H200, torch 2.11, triton 3.6, 2026-12-03, `bwd_chunk_tma_h200.json`): not faster. The real kernel 0.405 ms
a call (255 registers, 2 spilled, 80 KB shared); TMA loads at 4 warps 0.522 (255 registers, 22 spilled: the tiles still
come into registers for the elementwise work, now later and all at once), with TMA stores too 0.528-0.530; at 8 warps
1.00-1.06. Same outputs (0 at 4 warps, 1.6e-7 at 8). The CPU check: 0.0 for every output, both store forms.

    python benchmarks/exp_bwd_chunk_tma.py --out benchmarks/results/bwd_chunk_tma_h200.json
    python benchmarks/exp_bwd_chunk_tma.py --check
"""
import argparse, os, statistics, sys

if "--check" in sys.argv and not os.environ.get("TRITON_INTERPRET"):
    os.environ["TRITON_INTERPRET"] = "1"               # before triton is imported: the interpreter, for the CPU check

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from mamba3_lite.ssd.triton.phases import dot, dot_precision


@triton.jit(do_not_specialize=["T", "NC"])
def tma_chunk_kernel(q_d, k_d, x_d, dy_d, a_ptr, st_d, dst_d, cos_ptr, sin_ptr, o1_d, o2_d, o3_d, o4_d, dx_d,
                     o1_ptr, o2_ptr, o3_ptr, o4_ptr, dx_ptr, da_ptr, kdk_ptr, gs_ptr, dth_ptr,
                     sob, sot, soh, sgb, sgt, sgh, T, H, NH, Q, NC, TMA_STORE: tl.constexpr, PREC: tl.constexpr,
                     BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    "bwd_chunk_kernel with ROTATE and WITH_DX (the model's launch), fp32 accumulators, tiles through descriptors."
    pid = tl.program_id(0)
    h, c, b = pid % H, (pid // H) % NC, pid // (H * NC)
    offs, offs_n, offs_d = tl.arange(0, BQ), tl.arange(0, BN), tl.arange(0, BD)
    t = c * Q + offs
    mt = (offs < Q) & (t < T)
    a = tl.load(a_ptr + (b * NC * Q + t) * H + h, mask=offs < Q, other=0.)
    a_end = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h)
    causal = (offs[:, None] >= offs[None, :]) & mt[None, :]
    w = tl.exp(tl.where(mt, a_end - a, float("-inf")))[:, None]
    xs = x_d.load([b, c * Q, h, 0]).reshape(BQ, BD)
    dy = dy_d.load([b, c * Q, h, 0]).reshape(BQ, BD)
    L = tl.exp(tl.where(causal, a[:, None] - a[None, :], float("-inf")))
    dA = (dot(dy, tl.trans(xs), False, PREC) * L).to(xs.dtype)
    q1 = q_d.load([b, c * Q, h, 0]).reshape(BQ, BN)
    q2 = q_d.load([b, c * Q, h, NH]).reshape(BQ, BN)
    k1 = k_d.load([b, c * Q, h, 0]).reshape(BQ, BN)
    k2 = k_d.load([b, c * Q, h, NH]).reshape(BQ, BN)
    row = ((b * NC + c) * H + h) * 2 * NH
    S1 = st_d.load([row, 0]).to(xs.dtype)
    S2 = st_d.load([row + NH, 0]).to(xs.dtype)
    G1 = dst_d.load([row, 0]).to(xs.dtype)
    G2 = dst_d.load([row + NH, 0]).to(xs.dtype)
    gs = tl.sum(tl.sum(S1.to(w.dtype) * G1.to(w.dtype) + S2.to(w.dtype) * G2.to(w.dtype), axis=1), axis=0)
    tl.store(gs_ptr + (b * NC + c) * H + h, gs)
    ea = tl.exp(a)[:, None]
    dq1 = dot(dA, k1, False, PREC) + dot(dy, tl.trans(S1), False, PREC) * ea
    dq2 = dot(dA, k2, False, PREC) + dot(dy, tl.trans(S2), False, PREC) * ea
    q1f, q2f = q1.to(dq1.dtype), q2.to(dq1.dtype)
    da = tl.sum(q1f * dq1 + q2f * dq2, axis=1)
    dth = tl.sum(q1f * dq2 - q2f * dq1, axis=1)
    co = tl.load(cos_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    si = tl.load(sin_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    ty = o1_ptr.dtype.element_ty
    oo = b * sob + t[:, None] * sot + h * soh + offs_n[None, :]
    mtn = mt[:, None] & (offs_n < NH)[None, :]
    if TMA_STORE:
        o1_d.store([b, c * Q, h, 0], (co * dq1 + si * dq2).to(ty).reshape(1, BQ, 1, BN))
        o2_d.store([b, c * Q, h, 0], (co * dq2 - si * dq1).to(ty).reshape(1, BQ, 1, BN))
    else:
        tl.store(o1_ptr + oo, (co * dq1 + si * dq2).to(ty), mask=mtn)
        tl.store(o2_ptr + oo, (co * dq2 - si * dq1).to(ty), mask=mtn)
    P = ((dot(q1, tl.trans(k1), False, PREC) + dot(q2, tl.trans(k2), False, PREC)) * L).to(dy.dtype)
    dx = dot(tl.trans(P), dy, False, PREC) + (dot(k1, G1, False, PREC) + dot(k2, G2, False, PREC)) * w
    if TMA_STORE:
        dx_d.store([b, c * Q, h, 0], dx.to(dx_ptr.dtype.element_ty).reshape(1, BQ, 1, BD))
    else:
        tl.store(dx_ptr + b * sgb + t[:, None] * sgt + h * sgh + offs_d[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=mt[:, None] & (offs_d < BD)[None, :])
    dk1 = dot(xs, tl.trans(G1), False, PREC) * w
    dk2 = dot(xs, tl.trans(G2), False, PREC) * w
    k1f, k2f = k1.to(dk1.dtype), k2.to(dk1.dtype)
    kdk = tl.sum(k1f * dk1 + k2f * dk2, axis=1)
    dk1 += dot(tl.trans(dA), q1, False, PREC)
    dk2 += dot(tl.trans(dA), q2, False, PREC)
    da -= tl.sum(k1f * dk1 + k2f * dk2, axis=1)
    dth += tl.sum(k1f * dk2 - k2f * dk1, axis=1)
    if TMA_STORE:
        o3_d.store([b, c * Q, h, 0], (co * dk1 + si * dk2).to(ty).reshape(1, BQ, 1, BN))
        o4_d.store([b, c * Q, h, 0], (si * dk1 - co * dk2).to(ty).reshape(1, BQ, 1, BN))
    else:
        tl.store(o3_ptr + oo, (co * dk1 + si * dk2).to(ty), mask=mtn)
        tl.store(o4_ptr + oo, (si * dk1 - co * dk2).to(ty), mask=mtn)
    part = (b * NC * Q + c * Q + offs) * H + h
    tl.store(da_ptr + part, da, mask=offs < Q)
    tl.store(kdk_ptr + part, kdk, mask=offs < Q)
    tl.store(dth_ptr + part, dth, mask=offs < Q)


def tma_backward(q, k, x, dy, alpha, states, dstates, Q, cos, sin, tma_store=True, num_warps=4, num_stages=1):
    """The TMA kernel on `scan_backward_chunk`'s inputs (its ROTATE, WITH_DX launch). Returns (dB_re, dB_im, dC_re,
    dC_im), dx, (da, kdk, gs), dth — the real launcher's order, with `end_terms_apart`."""
    Bsz, T, H, M = q.shape
    D, NC, NH = x.shape[-1], alpha.shape[1] // Q, M // 2
    desc = lambda t, cols: TensorDescriptor(t, list(t.shape), list(t.stride()), [1, Q, 1, cols])
    outs = [torch.empty(Bsz, T, H, NH, dtype=q.dtype, device=q.device) for _ in range(4)]   # dC_re, dC_im, dB_re, dB_im
    dx = torch.empty(Bsz, T, H, D, dtype=dy.dtype, device=dy.device)
    da, kdk, dth = (torch.empty(Bsz, NC * Q, H, dtype=alpha.dtype, device=q.device) for _ in range(3))
    gs = torch.empty(Bsz, NC, H, dtype=alpha.dtype, device=q.device)
    flat = lambda s: TensorDescriptor(s.view(-1, D), [s.numel() // D, D], [D, 1], [NH, D])
    tma_chunk_kernel[(Bsz * NC * H,)](
        desc(q, NH), desc(k, NH), desc(x, D), desc(dy, D), alpha, flat(states), flat(dstates), cos, sin,
        *(desc(o, NH) for o in outs), desc(dx, D), *outs, dx, da, kdk, gs, dth,
        *outs[0].stride()[:3], *dx.stride()[:3], T, H, NH, Q, NC, TMA_STORE=tma_store, PREC=dot_precision(q.dtype),
        BQ=Q, BN=NH, BD=D, num_warps=num_warps, num_stages=num_stages)
    return (outs[2], outs[3], outs[0], outs[1]), dx, (da, kdk, gs), dth


def flat_outputs(res):
    "Every tensor of a backward's result, in order."
    (bc, dx, (da, kdk, gs), dth) = res
    return [*bc, dx, da, kdk, gs, dth]


def check():
    "Both kernels on the interpreter in fp32 at T = 88: the largest difference of each output."
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk
    from mamba3_lite.ssd.triton.chunk_state import states_backward, states_forward
    torch.manual_seed(0)
    Bsz, T, H, M, D, Q = 2, 88, 2, 32, 16, 16
    NC = -(-T // Q)
    q, k = torch.randn(Bsz, T, H, M), torch.randn(Bsz, T, H, M)
    x, dy = torch.randn(Bsz, T, H, D), torch.randn(Bsz, T, H, D)
    alpha = -torch.rand(Bsz, NC, Q, H).cumsum(2).reshape(Bsz, NC * Q, H) * 0.3
    states, _ = states_forward(k, x, alpha, None, Q)
    dstates, _ = states_backward(q, dy, alpha, None, Q, torch.float32)
    theta = torch.rand(Bsz, T, H) * 6.28
    cos, sin = theta.cos(), theta.sin()
    ref = scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.float32, end_terms_apart=True)
    for store in (True, False):
        new = tma_backward(q, k, x, dy, alpha, states, dstates, Q, cos, sin, tma_store=store)
        diffs = [(a - b).abs().max().item() for a, b in zip(flat_outputs(new), flat_outputs(ref))]
        print(f"tma_store={store}: largest differences {diffs}")
        assert max(diffs) < 1e-4, diffs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5); p.add_argument("--out"); p.add_argument("--check", action="store_true")
    a = p.parse_args()
    if a.check: return check()
    if not torch.cuda.is_available(): sys.exit("exp_bwd_chunk_tma: needs a CUDA GPU (or --check on the interpreter)")
    from common import emit, queued_ms, rel_diff, rotated_backward_inputs
    from bench_kernel_regs import Capped, compiled_info
    from mamba3_lite.ssd.triton import chunk_scan
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    q, k, x, dy, alpha, states, dstates, cos, sin = rotated_backward_inputs()
    Q = 64
    real_k = Capped(chunk_scan.bwd_chunk_kernel); chunk_scan.bwd_chunk_kernel = real_k
    tma_k = Capped(tma_chunk_kernel); globals()["tma_chunk_kernel"] = tma_k
    real = lambda: chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                                  num_warps=TUNE["warps_chunk"], num_stages=TUNE["stages_chunk"],
                                                  end_terms_apart=True)
    forms = {"real bwd_chunk_kernel": (real, real_k)}
    for store in (False, True):
        for warps in (4, 8):
            for stages in (1, 2):
                fn = (lambda s=store, w=warps, st=stages: tma_backward(q, k, x, dy, alpha, states, dstates, Q, cos, sin,
                                                                       tma_store=s, num_warps=w, num_stages=st))
                forms[f"tma loads, tma_store={store}, warps={warps}, stages={stages}"] = (fn, tma_k)
    ref = flat_outputs(real())
    rows, times = {}, {n: [] for n in forms}
    for name, (fn, capped) in forms.items():
        try:
            out = flat_outputs(fn())
            rows[name] = {"rel_diff": max(rel_diff(o, r) for o, r in zip(out, ref)), "compiled": compiled_info(capped.last)}
        except Exception as e:
            rows[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    for _ in range(a.rounds):
        for name, (fn, _) in forms.items():
            if "error" not in rows[name]: times[name].append(queued_ms(fn))
    for name, ts in times.items():
        if ts: rows[name].update(ms=round(statistics.median(ts), 4), ms_rounds=[round(t, 4) for t in ts])
    emit(rows, "cuda", a.out, rounds=a.rounds, shape=dict(B=16, T=2048, H=16, M=128, D=64, Q=64, dtype="bf16"),
         note="ms per call of 20 queued back to back, the median of interleaved rounds; rel_diff against the real kernel")


if __name__ == "__main__":
    main()
