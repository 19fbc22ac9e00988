"""A recorded experiment, not kept: chapter 05c's one-kernel backward (`bwd_chunk_kernel`, one program per chunk and
head: 255 registers a thread in an sm_90 compile, so at most two programs per SM) split into three programs per chunk -- dq (with the
rotation's transpose into dC), dk (into dB) and dx -- each with fewer live tiles, recomputing the scores they share;
and a few launch choices of 05c's forward `scan_y`. At the 434M model's training shape (B=16, T=2048, H=16, M=128,
D=64, chunk 64, bf16) on one H200 (2026-12-01): the split takes 0.74 ms a call against the one kernel's 0.61 in the
same process (its extra reads of q, k, dy cost more than the occupancy gains), so the package keeps the one kernel.
Each variant is checked against the one kernel (max |diff| / max |ref|), and first, at a small uneven shape in fp32,
in the interpreter or on the GPU. Prints one JSON record; needs a CUDA GPU (`--check`: only the small parity check,
which runs under TRITON_INTERPRET=1 too).

    python benchmarks/exp_bwd_split.py --out benchmarks/results/bwd_split_h200.json
"""
import argparse, itertools, json, os, sys

import torch
import triton
import triton.language as tl

from mamba3_lite.ssd.triton.phases import dot, dot_precision, block_size, strides3
from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk, chunk_end_terms


@triton.jit(do_not_specialize=["T", "NC"])
def bwd_split_kernel(q_ptr, k_ptr, x_ptr, dy_ptr, a_ptr, st_ptr, dst_ptr, cos_ptr, sin_ptr,
                     o1_ptr, o2_ptr, o3_ptr, o4_ptr, dx_ptr, da_ptr, kdk_ptr, gs_ptr, dth_ptr,
                     sqb, sqt, sqh, skb, skt, skh, sxb, sxt, sxh, sdb, sdt, sdh, sob, sot, soh, sgb, sgt, sgh,
                     T, H, NH, D, Q, NC, ROWS, NPARTS: tl.constexpr, ROTATE: tl.constexpr, F64: tl.constexpr,
                     PREC: tl.constexpr, BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0)
    part, pid = pid % NPARTS, pid // NPARTS
    h, c, b = pid % H, (pid // H) % NC, pid // (H * NC)
    offs, offs_n, offs_d = tl.arange(0, BQ), tl.arange(0, BN), tl.arange(0, BD)
    t = c * Q + offs
    mt, mn, mdd = (offs < Q) & (t < T), offs_n < NH, offs_d < D
    mtn, mtd, mnd = mt[:, None] & mn[None, :], mt[:, None] & mdd[None, :], mn[:, None] & mdd[None, :]
    a = tl.load(a_ptr + (b * NC * Q + t) * H + h, mask=offs < Q, other=0.)
    a_end = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h)
    causal = (offs[:, None] >= offs[None, :]) & mt[None, :]
    w = tl.exp(tl.where(mt, a_end - a, float("-inf")))[:, None]
    L = tl.exp(tl.where(causal, a[:, None] - a[None, :], float("-inf")))
    dy = tl.load(dy_ptr + b * sdb + t[:, None] * sdt + h * sdh + offs_d[None, :], mask=mtd, other=0.)
    qo = q_ptr + b * sqb + t[:, None] * sqt + h * sqh + offs_n[None, :]
    ko = k_ptr + b * skb + t[:, None] * skt + h * skh + offs_n[None, :]
    so = ((b * NC + c) * H + h) * 2 * NH * D + offs_n[:, None] * D + offs_d[None, :]
    oo = b * sob + t[:, None] * sot + h * soh + offs_n[None, :]
    part_rows = (b * NC * Q + c * Q + offs) * H + h
    ty = o1_ptr.dtype.element_ty
    if part == 2:                                       # dx
        q1, q2 = tl.load(qo, mask=mtn, other=0.), tl.load(qo + NH, mask=mtn, other=0.)
        k1, k2 = tl.load(ko, mask=mtn, other=0.), tl.load(ko + NH, mask=mtn, other=0.)
        G1 = tl.load(dst_ptr + so, mask=mnd, other=0.).to(dy.dtype)
        G2 = tl.load(dst_ptr + so + NH * D, mask=mnd, other=0.).to(dy.dtype)
        P = ((dot(q1, tl.trans(k1), F64, PREC) + dot(q2, tl.trans(k2), F64, PREC)) * L).to(dy.dtype)
        dx = dot(tl.trans(P), dy, F64, PREC) + (dot(k1, G1, F64, PREC) + dot(k2, G2, F64, PREC)) * w
        tl.store(dx_ptr + b * sgb + t[:, None] * sgt + h * sgh + offs_d[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=mtd)
    else:
        xs = tl.load(x_ptr + b * sxb + t[:, None] * sxt + h * sxh + offs_d[None, :], mask=mtd, other=0.)
        dA = (dot(dy, tl.trans(xs), F64, PREC) * L).to(xs.dtype)
        if ROTATE:
            co = tl.load(cos_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
            si = tl.load(sin_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
        if part == 0:                                   # dq, and <G, S_in>
            k1, k2 = tl.load(ko, mask=mtn, other=0.), tl.load(ko + NH, mask=mtn, other=0.)
            S1 = tl.load(st_ptr + so, mask=mnd, other=0.).to(xs.dtype)
            S2 = tl.load(st_ptr + so + NH * D, mask=mnd, other=0.).to(xs.dtype)
            ea = tl.exp(a)[:, None]
            dq1 = dot(dA, k1, F64, PREC) + dot(dy, tl.trans(S1), F64, PREC) * ea
            dq2 = dot(dA, k2, F64, PREC) + dot(dy, tl.trans(S2), F64, PREC) * ea
            q1, q2 = tl.load(qo, mask=mtn, other=0.), tl.load(qo + NH, mask=mtn, other=0.)
            q1f, q2f = q1.to(dq1.dtype), q2.to(dq1.dtype)
            tl.store(da_ptr + part_rows, tl.sum(q1f * dq1 + q2f * dq2, axis=1), mask=offs < Q)
            tl.store(dth_ptr + part_rows, tl.sum(q1f * dq2 - q2f * dq1, axis=1), mask=offs < Q)
            if ROTATE:
                tl.store(o1_ptr + oo, (co * dq1 + si * dq2).to(ty), mask=mtn)
                tl.store(o2_ptr + oo, (co * dq2 - si * dq1).to(ty), mask=mtn)
            else:
                tl.store(o1_ptr + oo, dq1.to(ty), mask=mtn); tl.store(o1_ptr + oo + NH, dq2.to(ty), mask=mtn)
            Gf1 = tl.load(dst_ptr + so, mask=mnd, other=0.).to(w.dtype)
            Gf2 = tl.load(dst_ptr + so + NH * D, mask=mnd, other=0.).to(w.dtype)
            gs = tl.sum(tl.sum(S1.to(w.dtype) * Gf1 + S2.to(w.dtype) * Gf2, axis=1), axis=0)
            tl.store(gs_ptr + (b * NC + c) * H + h, gs)
        else:                                           # dk
            G1 = tl.load(dst_ptr + so, mask=mnd, other=0.).to(xs.dtype)
            G2 = tl.load(dst_ptr + so + NH * D, mask=mnd, other=0.).to(xs.dtype)
            dk1 = dot(xs, tl.trans(G1), F64, PREC) * w
            dk2 = dot(xs, tl.trans(G2), F64, PREC) * w
            k1, k2 = tl.load(ko, mask=mtn, other=0.), tl.load(ko + NH, mask=mtn, other=0.)
            k1f, k2f = k1.to(dk1.dtype), k2.to(dk1.dtype)
            tl.store(kdk_ptr + part_rows, tl.sum(k1f * dk1 + k2f * dk2, axis=1), mask=offs < Q)
            q1, q2 = tl.load(qo, mask=mtn, other=0.), tl.load(qo + NH, mask=mtn, other=0.)
            dk1 += dot(tl.trans(dA), q1, F64, PREC)
            dk2 += dot(tl.trans(dA), q2, F64, PREC)
            tl.store(da_ptr + ROWS + part_rows, -tl.sum(k1f * dk1 + k2f * dk2, axis=1), mask=offs < Q)
            tl.store(dth_ptr + ROWS + part_rows, tl.sum(k1f * dk2 - k2f * dk1, axis=1), mask=offs < Q)
            if ROTATE:
                tl.store(o3_ptr + oo, (co * dk1 + si * dk2).to(ty), mask=mtn)
                tl.store(o4_ptr + oo, (si * dk1 - co * dk2).to(ty), mask=mtn)
            else:
                tl.store(o3_ptr + oo, dk1.to(ty), mask=mtn); tl.store(o3_ptr + oo + NH, dk2.to(ty), mask=mtn)


def split_backward(q, k, x, dy, alpha, states, dstates, Q, cos, sin, bc_dtype, nparts=3, num_warps=4, num_stages=1):
    Bsz, T, H, M = q.shape
    D, NC, acc = x.shape[-1], alpha.shape[1] // Q, alpha.dtype
    outs = [torch.empty(Bsz, T, H, M // 2, dtype=bc_dtype, device=q.device) for _ in range(4)]
    dx = torch.empty(Bsz, T, H, D, dtype=dy.dtype, device=dy.device)
    da, dth = (torch.empty(2, Bsz, NC * Q, H, dtype=acc, device=q.device) for _ in range(2))
    kdk = torch.empty(Bsz, NC * Q, H, dtype=acc, device=q.device)
    gs = torch.empty(Bsz, NC, H, dtype=acc, device=q.device)
    bwd_split_kernel[(Bsz * NC * H * nparts,)](
        q, k, x, dy, alpha, states, dstates, cos, sin, *outs, dx, da, kdk, gs, dth, *strides3(q), *strides3(k),
        *strides3(x), *strides3(dy), *strides3(outs[0]), *strides3(dx), T, H, M // 2, D, Q, NC, Bsz * NC * Q * H,
        NPARTS=nparts, ROTATE=True, F64=acc == torch.float64, PREC=dot_precision(q.dtype),
        BQ=block_size(Q), BN=block_size(M // 2), BD=block_size(D), num_warps=num_warps, num_stages=num_stages)
    return (outs[2], outs[3], outs[0], outs[1]), dx, chunk_end_terms(da[0] + da[1], kdk, gs, alpha, Q), dth[0] + dth[1]


def check_small():
    "Interpreter / GPU parity at a small uneven shape, fp32."
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(1)
    Bsz, T, H, M, D, Q = 2, 96, 3, 32, 16, 32
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    r = lambda *s: torch.randn(*s, device=dev, generator=g)
    q, k, x, dy = r(Bsz, T, H, M), r(Bsz, T, H, M), r(Bsz, T, H, D), r(Bsz, T, H, D)
    alpha = -torch.rand(Bsz, T // Q, Q, H, device=dev, generator=g).cumsum(2).view(Bsz, T, H) * 0.3
    states, _ = states_forward(k, x, alpha, None, Q, BM=32, BD=16)
    dstates, _ = states_backward(q, dy, alpha, None, Q, states.dtype, BM=32, BD=16)
    th = r(Bsz, T, H)
    ref = scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, th.cos(), th.sin(), torch.float32)
    new = split_backward(q, k, x, dy, alpha, states, dstates, Q, th.cos(), th.sin(), torch.float32)
    flat = lambda o: [*o[0], o[1], o[2], o[3]]
    return [float((u - v).abs().max() / v.abs().max()) for u, v in zip(flat(new), flat(ref))]


def main():
    p = argparse.ArgumentParser(); p.add_argument("--out"); p.add_argument("--check", action="store_true")
    a = p.parse_args()
    print("small parity (rel):", check_small(), flush=True)
    if a.check: return
    sys.path.insert(0, os.path.dirname(__file__))
    from common import cuda_event_ms as timed, emit, rel_diff as rel, scan_backward_inputs
    Bsz, T, H, M, D, Q = 16, 2048, 16, 128, 64, 64
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(Bsz, T, H, M, D, Q)
    theta = torch.rand(Bsz, T, H, device="cuda", generator=g) * 6.28
    cos, sin = theta.cos(), theta.sin()
    flat = lambda o: [*o[0], o[1], o[2], o[3]]
    base = lambda: scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16)
    ref = flat(base())
    rows = [dict(path="one program (today)", ms=round(timed(base), 4))]
    print(json.dumps(rows[-1]), flush=True)
    for parts, wp, st in itertools.product((3,), (4, 8, 2), (1, 2)):
        row = dict(path=f"{parts} programs per chunk", warps=wp, stages=st)
        try:
            fn = lambda: split_backward(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16, parts, wp, st)
            res = flat(fn()); row["ms"] = round(timed(fn), 4)
            row["rel_diff"] = [float(f"{rel(u, v):.2e}") for u, v in zip(res, ref)]
        except Exception as e:
            row["error"] = str(e)[:200]
        rows.append(row); print(json.dumps(row), flush=True)
    from mamba3_lite.ssd.triton.chunk_scan import scan_y
    yref = scan_y(q, k, x, alpha, states, Q)
    for BC, BD, wp, st in [(64, 64, 4, 2), (64, 64, 4, 1), (64, 64, 4, 3), (64, 32, 4, 1), (32, 64, 4, 2)]:
        row = dict(path="scan_y", BC=BC, BD=BD, warps=wp, stages=st)
        try:
            fn = lambda: scan_y(q, k, x, alpha, states, Q, BC=BC, BD=BD, num_warps=wp, num_stages=st)
            row["rel_diff"] = float(f"{rel(fn(), yref):.2e}"); row["ms"] = round(timed(fn), 4)
        except Exception as e:
            row["error"] = str(e)[:200]
        rows.append(row); print(json.dumps(row), flush=True)
    emit(sorted(rows, key=lambda r: r.get("ms", 1e9)), device=torch.device("cuda"), out=a.out, benchmark="bwd_split")


if __name__ == "__main__":
    main()
