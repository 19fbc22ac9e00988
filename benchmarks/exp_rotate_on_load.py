"""The rotation done where q and k are read, never stored? An experiment, not kernels of the package.

The package rotates B and C into q and k with one kernel (05a's `rotate_fwd_kernel`: it reads the four planes
B_re, B_im, C_re, C_im and writes q and k, ~536 MB a layer at B=16, T=2048) and every scan kernel then reads q or k.
Here no q or k is ever written: each of the four kernels that read them rotates its own tile of B or C as it loads it
(the same expressions as 05a's, in fp32, rounded to the operands' dtype as the stored q and k are):

- `state_rot_kernel`: 05b's forward state pass reading B (k) or, with `IS_Q`, its reverse pass reading C (q);
- `scan_fwd_rot_kernel`: 05c's `scan_fwd_kernel` with M as two halves (q1, q2 and k1, k2 made from one load of
  each plane: the products with the state and the scores become two K = N products each);
- `bwd_chunk_rot_kernel`: 05c's one-kernel backward (with the rotation's transpose and dx, as the model runs it)
  reading B and C instead of q and k.

A state-pass program owns a tile of M's rows, so it needs both planes of B (or C) for either half: the state passes
read twice the bytes of k (or q) they read now. The forward also stops storing q and k, so the autograd would save
the projection alone (7.5 GB less at the h200 preset's micro-batch, not measured here).

On the GPU (`--out`): the package's chain (rotate, forward state pass, scan output; reverse state pass, one-kernel
backward) against this one, each kernel and each direction timed as a step queues them, at `--batch`, `--seq`, with
B and C read in place from a packed projection as the model lays it out; outputs against the package's. On a CPU
(`--check`): every kernel on Triton's interpreter in fp32 against the package's kernels fed the rotated q and k.

Result (one H200, torch 2.11, triton 3.6, 2026-12-04; `rotate_on_load_h200.json`, `rotate_on_load_8192_h200.json`):
not faster, as the first try in the model found (chapter 05d, `speed_h200_rotate_on_load.json`, 2026-12-01). A layer's
forward and backward take 1.338 ms against the package's 0.861 at B=16, T=2048 (0.890 at B=4, T=8192). Kernel by
kernel at B=16, T=2048: the state passes 0.158 and 0.156 ms against 0.096 and 0.094 (both planes of B or C per tile of
M, read from the projection's 10 KB rows), `scan_fwd_rot_kernel` 0.271 against `scan_y`'s 0.135 (the halves double
its products' count at half their depth), `bwd_chunk_rot_kernel` 0.747 against 0.403 (584 bytes of registers spilled
a thread for sm_90 by `aot_kernel_resources.resources`, against the package kernel's 72), where the rotation they
replace costs 0.136. Outputs: the states bit-equal, the rest within bf16's rounding (largest 4.0e-3 of the largest
value, dB_re). The CPU check: 0 for every output but y (8.8e-8: its product with the state as two halves).

    python benchmarks/exp_rotate_on_load.py --check
    python benchmarks/exp_rotate_on_load.py --out benchmarks/results/rotate_on_load_h200.json
    python benchmarks/exp_rotate_on_load.py --batch 4 --seq 8192 --out benchmarks/results/rotate_on_load_8192_h200.json
"""
import argparse, os, statistics, sys

if "--check" in sys.argv and not os.environ.get("TRITON_INTERPRET"):
    os.environ["TRITON_INTERPRET"] = "1"               # before triton is imported: the interpreter, for the CPU check

import torch
import triton
import triton.language as tl

from common import rel_diff
from mamba3_lite.ssd.triton.phases import block_size, dot, dot_precision, strides3


@triton.jit
def rot_q(re, im, co, si):
    "05a's q halves from C: [cos Cr - sin Ci, sin Cr + cos Ci]."
    return co * re - si * im, si * re + co * im


@triton.jit
def rot_k(re, im, co, si):
    "05a's k halves from B: [cos Br + sin Bi, sin Br - cos Bi]."
    return co * re + si * im, si * re - co * im


@triton.jit(do_not_specialize=["T", "NC"])
def state_rot_kernel(re_ptr, im_ptr, cos_ptr, sin_ptr, v_ptr, a_ptr, st_ptr, sf_ptr,
                     sbb, sbt, sbh, svb, svt, svh, T, H, M, D, Q, NC,
                     IS_Q: tl.constexpr, PREC: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    """05b's state pass with this tile's rows of k (from B) or, with IS_Q, of q (from C, chunks in reverse) rotated on
    load: S <- e^{a_end} S + sum_s w_s k_s x_s^T, or G <- e^{a_end} G + sum_l e^{a_l} q_l dy_l^T."""
    pid_m, pid_d, pid_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = pid_bh // H, pid_bh % H
    NH = M // 2
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_d = pid_d * BD + tl.arange(0, BD)
    offs_s = tl.arange(0, BQ)
    mm = offs_m < M
    mmd = mm[:, None] & (offs_d < D)[None, :]
    md = offs_m[:, None] * D + offs_d[None, :]
    first = (offs_m < NH)[:, None]
    n = tl.where(offs_m < NH, offs_m, offs_m - NH)
    S = tl.zeros([BM, BD], dtype=tl.float32)
    for i in range(NC):
        if IS_Q:
            c = NC - 1 - i
        else:
            c = i
        tl.store(st_ptr + ((b * NC + c) * H + h) * M * D + md, S.to(st_ptr.dtype.element_ty), mask=mmd)
        t_s = c * Q + offs_s
        ms = (offs_s < Q) & (t_s < T)
        a_end = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h)
        a_s = tl.load(a_ptr + (b * NC * Q + t_s) * H + h, mask=offs_s < Q, other=0.)
        if IS_Q:
            wt = tl.exp(tl.where(ms, a_s, float("-inf")))
        else:
            wt = tl.exp(tl.where(ms, a_end - a_s, float("-inf")))
        co = tl.load(cos_ptr + (b * T + t_s) * H + h, mask=ms, other=0.)[None, :]
        si = tl.load(sin_ptr + (b * T + t_s) * H + h, mask=ms, other=0.)[None, :]
        o = b * sbb + t_s[None, :] * sbt + h * sbh + n[:, None]                       # (BM, BQ): row m, step s
        mk = mm[:, None] & ms[None, :]
        re = tl.load(re_ptr + o, mask=mk, other=0.).to(tl.float32)
        im = tl.load(im_ptr + o, mask=mk, other=0.).to(tl.float32)
        if IS_Q:
            r1, r2 = rot_q(re, im, co, si)
        else:
            r1, r2 = rot_k(re, im, co, si)
        vs = tl.load(v_ptr + b * svb + t_s[:, None] * svt + h * svh + offs_d[None, :],
                     mask=ms[:, None] & (offs_d < D)[None, :], other=0.)                   # (BQ, BD)
        rows = tl.where(first, r1, r2).to(vs.dtype)                                    # as the stored q or k
        S = S * tl.exp(a_end) + dot((rows * wt[None, :]).to(vs.dtype), vs, False, PREC)
    tl.store(sf_ptr + pid_bh * M * D + md, S, mask=mmd)


@triton.jit(do_not_specialize=["T", "NC"])
def scan_fwd_rot_kernel(br_ptr, bi_ptr, cr_ptr, ci_ptr, cos_ptr, sin_ptr, x_ptr, a_ptr, st_ptr, y_ptr,
                        sbb, sbt, sbh, sxb, sxt, sxh, syb, syt, syh, T, H, NH, D, Q, NC,
                        PREC: tl.constexpr, BC: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    "05c's scan_fwd_kernel with q, k made from C, B on load, M as two halves: y_l = e^{a_l} q_l S_in + sum_s L (q_l . k_s) x_s."
    pid_ld, pid_bch = tl.program_id(0), tl.program_id(1)
    nd = tl.cdiv(D, BD)
    pid_l, pid_d = pid_ld // nd, pid_ld % nd
    h, c, b = pid_bch % H, (pid_bch // H) % NC, pid_bch // (H * NC)
    offs_l = pid_l * BC + tl.arange(0, BC)
    offs_n = tl.arange(0, BN)
    offs_d = pid_d * BD + tl.arange(0, BD)
    t_l = c * Q + offs_l
    ml, mn, mdd = (offs_l < Q) & (t_l < T), offs_n < NH, offs_d < D
    a_l = tl.load(a_ptr + (b * NC * Q + t_l) * H + h, mask=offs_l < Q, other=0.)
    co = tl.load(cos_ptr + (b * T + t_l) * H + h, mask=ml, other=0.)[:, None]
    si = tl.load(sin_ptr + (b * T + t_l) * H + h, mask=ml, other=0.)[:, None]
    ol = b * sbb + t_l[:, None] * sbt + h * sbh + offs_n[None, :]
    mln = ml[:, None] & mn[None, :]
    q1, q2 = rot_q(tl.load(cr_ptr + ol, mask=mln, other=0.).to(tl.float32),
                   tl.load(ci_ptr + ol, mask=mln, other=0.).to(tl.float32), co, si)
    ty = x_ptr.dtype.element_ty
    q1, q2 = q1.to(ty), q2.to(ty)                                                      # (BC, BN) each
    so = ((b * NC + c) * H + h) * 2 * NH * D + offs_n[:, None] * D + offs_d[None, :]
    mnd = mn[:, None] & mdd[None, :]
    S1 = tl.load(st_ptr + so, mask=mnd, other=0.).to(ty)
    S2 = tl.load(st_ptr + so + NH * D, mask=mnd, other=0.).to(ty)
    acc = (dot(q1, S1, False, PREC) + dot(q2, S2, False, PREC)) * tl.exp(a_l)[:, None]
    for s0 in range(0, tl.minimum((pid_l + 1) * BC, Q), BC):                           # causal blocks only
        offs_s = s0 + tl.arange(0, BC)
        t_s = c * Q + offs_s
        ms = (offs_s < Q) & (t_s < T)
        a_s = tl.load(a_ptr + (b * NC * Q + t_s) * H + h, mask=offs_s < Q, other=0.)
        cs = tl.load(cos_ptr + (b * T + t_s) * H + h, mask=ms, other=0.)[None, :]
        ss = tl.load(sin_ptr + (b * T + t_s) * H + h, mask=ms, other=0.)[None, :]
        os_ = b * sbb + t_s[None, :] * sbt + h * sbh + offs_n[:, None]                 # (BN, BC): k transposed
        mns = mn[:, None] & ms[None, :]
        k1T, k2T = rot_k(tl.load(br_ptr + os_, mask=mns, other=0.).to(tl.float32),
                         tl.load(bi_ptr + os_, mask=mns, other=0.).to(tl.float32), cs, ss)
        causal = (offs_l[:, None] >= offs_s[None, :]) & ms[None, :]
        L = tl.exp(tl.where(causal, a_l[:, None] - a_s[None, :], float("-inf")))
        xs = tl.load(x_ptr + b * sxb + t_s[:, None] * sxt + h * sxh + offs_d[None, :],
                     mask=ms[:, None] & mdd[None, :], other=0.)                               # (BC, BD)
        scores = dot(q1, k1T.to(ty), False, PREC) + dot(q2, k2T.to(ty), False, PREC)
        acc += dot((scores * L).to(ty), xs, False, PREC)
    tl.store(y_ptr + b * syb + t_l[:, None] * syt + h * syh + offs_d[None, :],
             acc.to(y_ptr.dtype.element_ty), mask=ml[:, None] & mdd[None, :])


@triton.jit(do_not_specialize=["T", "NC"])
def bwd_chunk_rot_kernel(br_ptr, bi_ptr, cr_ptr, ci_ptr, x_ptr, dy_ptr, a_ptr, st_ptr, dst_ptr, cos_ptr, sin_ptr,
                         o1_ptr, o2_ptr, o3_ptr, o4_ptr, dx_ptr, da_ptr, kdk_ptr, gs_ptr, dth_ptr,
                         sbb, sbt, sbh, sxb, sxt, sxh, sdb, sdt, sdh, sob, sot, soh, sgb, sgt, sgh,
                         T, H, NH, D, Q, NC, PREC: tl.constexpr, BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    """05c's bwd_chunk_kernel as the model launches it (the rotation's transpose and dx inside), its q and k halves
    made from C and B on load. Its arithmetic after those four tiles is the package kernel's, line for line."""
    pid = tl.program_id(0)
    h, c, b = pid % H, (pid // H) % NC, pid // (H * NC)
    offs, offs_n, offs_d = tl.arange(0, BQ), tl.arange(0, BN), tl.arange(0, BD)
    t = c * Q + offs
    mt, mn, mdd = (offs < Q) & (t < T), offs_n < NH, offs_d < D
    mtn, mtd, mnd = mt[:, None] & mn[None, :], mt[:, None] & mdd[None, :], mn[:, None] & mdd[None, :]
    a = tl.load(a_ptr + (b * NC * Q + t) * H + h, mask=offs < Q, other=0.)
    a_end = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h)
    causal = (offs[:, None] >= offs[None, :]) & mt[None, :]
    w = tl.exp(tl.where(mt, a_end - a, float("-inf")))[:, None]
    xs = tl.load(x_ptr + b * sxb + t[:, None] * sxt + h * sxh + offs_d[None, :], mask=mtd, other=0.)
    dy = tl.load(dy_ptr + b * sdb + t[:, None] * sdt + h * sdh + offs_d[None, :], mask=mtd, other=0.)
    L = tl.exp(tl.where(causal, a[:, None] - a[None, :], float("-inf")))
    dA = (dot(dy, tl.trans(xs), False, PREC) * L).to(xs.dtype)
    co = tl.load(cos_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    si = tl.load(sin_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    bo = b * sbb + t[:, None] * sbt + h * sbh + offs_n[None, :]
    q1, q2 = rot_q(tl.load(cr_ptr + bo, mask=mtn, other=0.).to(tl.float32),
                   tl.load(ci_ptr + bo, mask=mtn, other=0.).to(tl.float32), co, si)
    q1, q2 = q1.to(xs.dtype), q2.to(xs.dtype)
    k1, k2 = rot_k(tl.load(br_ptr + bo, mask=mtn, other=0.).to(tl.float32),
                   tl.load(bi_ptr + bo, mask=mtn, other=0.).to(tl.float32), co, si)
    k1, k2 = k1.to(xs.dtype), k2.to(xs.dtype)
    so = ((b * NC + c) * H + h) * 2 * NH * D + offs_n[:, None] * D + offs_d[None, :]
    S1 = tl.load(st_ptr + so, mask=mnd, other=0.).to(xs.dtype)
    S2 = tl.load(st_ptr + so + NH * D, mask=mnd, other=0.).to(xs.dtype)
    G1 = tl.load(dst_ptr + so, mask=mnd, other=0.).to(xs.dtype)
    G2 = tl.load(dst_ptr + so + NH * D, mask=mnd, other=0.).to(xs.dtype)
    gs = tl.sum(tl.sum(S1.to(w.dtype) * G1.to(w.dtype) + S2.to(w.dtype) * G2.to(w.dtype), axis=1), axis=0)
    tl.store(gs_ptr + (b * NC + c) * H + h, gs)
    ea = tl.exp(a)[:, None]
    dq1 = dot(dA, k1, False, PREC) + dot(dy, tl.trans(S1), False, PREC) * ea
    dq2 = dot(dA, k2, False, PREC) + dot(dy, tl.trans(S2), False, PREC) * ea
    q1f, q2f = q1.to(dq1.dtype), q2.to(dq1.dtype)
    da = tl.sum(q1f * dq1 + q2f * dq2, axis=1)
    dth = tl.sum(q1f * dq2 - q2f * dq1, axis=1)
    oo = b * sob + t[:, None] * sot + h * soh + offs_n[None, :]
    ty = o1_ptr.dtype.element_ty
    tl.store(o1_ptr + oo, (co * dq1 + si * dq2).to(ty), mask=mtn)
    tl.store(o2_ptr + oo, (co * dq2 - si * dq1).to(ty), mask=mtn)
    P = ((dot(q1, tl.trans(k1), False, PREC) + dot(q2, tl.trans(k2), False, PREC)) * L).to(dy.dtype)
    dx = dot(tl.trans(P), dy, False, PREC) + (dot(k1, G1, False, PREC) + dot(k2, G2, False, PREC)) * w
    tl.store(dx_ptr + b * sgb + t[:, None] * sgt + h * sgh + offs_d[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mtd)
    dk1 = dot(xs, tl.trans(G1), False, PREC) * w
    dk2 = dot(xs, tl.trans(G2), False, PREC) * w
    k1f, k2f = k1.to(dk1.dtype), k2.to(dk1.dtype)
    kdk = tl.sum(k1f * dk1 + k2f * dk2, axis=1)
    dk1 += dot(tl.trans(dA), q1, False, PREC)
    dk2 += dot(tl.trans(dA), q2, False, PREC)
    da -= tl.sum(k1f * dk1 + k2f * dk2, axis=1)
    dth += tl.sum(k1f * dk2 - k2f * dk1, axis=1)
    tl.store(o3_ptr + oo, (co * dk1 + si * dk2).to(ty), mask=mtn)
    tl.store(o4_ptr + oo, (si * dk1 - co * dk2).to(ty), mask=mtn)
    part = (b * NC * Q + c * Q + offs) * H + h
    tl.store(da_ptr + part, da, mask=offs < Q)
    tl.store(kdk_ptr + part, kdk, mask=offs < Q)
    tl.store(dth_ptr + part, dth, mask=offs < Q)


def states_rot(re, im, cos, sin, v, alpha, Q, is_q, BM=64, BD=64, num_warps=4, num_stages=2):
    "The state pass (or, `is_q`, its reverse) reading B (or C) planes: states (B,NC,H,M,D) in v's dtype, final (B,H,M,D) fp32."
    Bsz, T, H, N = re.shape
    M, D, NC = 2 * N, v.shape[-1], alpha.shape[1] // Q
    BM, BD = min(BM, block_size(M)), min(BD, block_size(D))
    st = torch.empty(Bsz, NC, H, M, D, dtype=v.dtype, device=v.device)
    sf = torch.empty(Bsz, H, M, D, dtype=torch.float32, device=v.device)
    state_rot_kernel[(triton.cdiv(M, BM), triton.cdiv(D, BD), Bsz * H)](
        re, im, cos, sin, v, alpha, st, sf, *strides3(re), *strides3(v), T, H, M, D, Q, NC, IS_Q=is_q, PREC=dot_precision(v.dtype),
        BQ=block_size(Q), BM=BM, BD=BD, num_warps=num_warps, num_stages=num_stages)
    return st, sf


def scan_y_rot(bc, cos, sin, x, alpha, states, Q, BC=64, BD=64, num_warps=4, num_stages=2, maxnreg=None):
    "y (B,T,H,D) from B, C planes (`bc` = B_re, B_im, C_re, C_im, one layout) and 05b's states."
    Bsz, T, H, N = bc[0].shape
    D, NC = x.shape[-1], alpha.shape[1] // Q
    BC, BD = min(BC, block_size(Q)), min(BD, block_size(D))
    y = torch.empty(Bsz, T, H, D, dtype=x.dtype, device=x.device)
    scan_fwd_rot_kernel[(triton.cdiv(Q, BC) * triton.cdiv(D, BD), Bsz * NC * H)](
        *bc, cos, sin, x, alpha, states, y, *strides3(bc[0]), *strides3(x), *strides3(y), T, H, N, D, Q, NC, PREC=dot_precision(x.dtype),
        BC=BC, BN=block_size(N), BD=BD, num_warps=num_warps, num_stages=num_stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    return y


def backward_chunk_rot(bc, x, dy, alpha, states, dstates, cos, sin, Q, num_warps=4, num_stages=1):
    "(dB_re, dB_im, dC_re, dC_im), dx, (da, kdk, gs), dtheta: 05c's `scan_backward_chunk(..., end_terms_apart=True)` on B, C."
    Bsz, T, H, N = bc[0].shape
    D, NC = x.shape[-1], alpha.shape[1] // Q
    outs = [torch.empty(Bsz, T, H, N, dtype=x.dtype, device=x.device) for _ in range(4)]   # dC_re, dC_im, dB_re, dB_im
    dx = torch.empty_like(dy)
    da, kdk, dth = (torch.empty(Bsz, NC * Q, H, dtype=alpha.dtype, device=x.device) for _ in range(3))
    gs = torch.empty(Bsz, NC, H, dtype=alpha.dtype, device=x.device)
    bwd_chunk_rot_kernel[(Bsz * NC * H,)](
        *bc, x, dy, alpha, states, dstates, cos, sin, *outs, dx, da, kdk, gs, dth, *strides3(bc[0]), *strides3(x), *strides3(dy),
        *strides3(outs[0]), *strides3(dx), T, H, N, D, Q, NC, PREC=dot_precision(x.dtype), BQ=block_size(Q), BN=block_size(N),
        BD=block_size(D), num_warps=num_warps, num_stages=num_stages)
    return (outs[2], outs[3], outs[0], outs[1]), dx, (da, kdk, gs), dth


def inputs(Bsz, T, H, N, D, Q, dtype, device, seed=0):
    "A packed projection (B, T, H(D+4N+1)) as the model lays it out, its x and B, C views, decays, phases and dy."
    from mamba3_lite.ssd.triton.real_ssd import packed_parts
    g = torch.Generator(device=device).manual_seed(seed)
    proj = torch.randn(Bsz, T, H * (D + 4 * N + 1), device=device, generator=g).to(dtype)
    x, *bc, _ = packed_parts(proj, H, D, N)
    NC = -(-T // Q)
    alpha = (-torch.rand(Bsz, NC, Q, H, device=device, generator=g).cumsum(2) * 0.05).view(Bsz, NC * Q, H)
    theta = torch.rand(Bsz, T, H, device=device, generator=g) * 6.28
    dy = torch.randn(Bsz, T, H, D, device=device, generator=g).to(dtype)
    return x, bc, alpha, theta.cos(), theta.sin(), dy


def package_chain(x, bc, alpha, cos, sin, dy, Q, tune, pairs):
    "The package's kernels as the model runs them: forward (q, k, states, y) and backward (dstates, its outputs)."
    from mamba3_lite.ssd.triton.phases import rotate_forward
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    from mamba3_lite.ssd.triton.chunk_scan import scan_y, scan_backward_chunk
    from mamba3_lite.ssd.triton.real_ssd import state_blocks, scan_y_blocks
    def forward():
        q, k = rotate_forward(*bc, cos, sin, x.dtype, block_rows=tune["BR_rot"])
        states, _ = states_forward(k, x, alpha, None, Q, **state_blocks(tune, pairs))
        return q, k, states, scan_y(q, k, x, alpha, states, Q, **scan_y_blocks(tune))
    def backward(q, k, states):
        dstates, _ = states_backward(q, dy, alpha, None, Q, states.dtype, **state_blocks(tune, pairs, backward=True))
        bcg, dx, ends, dth = scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, x.dtype,
                                                 num_warps=tune["warps_chunk"], num_stages=tune["stages_chunk"],
                                                 end_terms_apart=True)
        return dstates, bcg, dx, ends, dth
    return forward, backward


def rotated_chain(x, bc, alpha, cos, sin, dy, Q, fwd_state, bwd_state, scan):
    "The same two directions with the rotation on load; no q or k."
    def forward():
        states, _ = states_rot(bc[0], bc[1], cos, sin, x, alpha, Q, False, **fwd_state)
        return states, scan_y_rot(bc, cos, sin, x, alpha, states, Q, **scan)
    def backward(states):
        dstates, _ = states_rot(bc[2], bc[3], cos, sin, dy, alpha, Q, True, **bwd_state)
        return (dstates, *backward_chunk_rot(bc, x, dy, alpha, states, dstates, cos, sin, Q))
    return forward, backward


def flat(*outs):
    "Every tensor in nested outputs, in order."
    for o in outs:
        if isinstance(o, (tuple, list)): yield from flat(*o)
        elif o is not None: yield o


def compare(ref_fwd, ref_bwd, new_fwd, new_bwd) -> dict:
    "Largest relative difference of each output, the package's chain against the rotated one (same order of outputs)."
    q, k, st, y = ref_fwd()
    ds, bcg, dx, ends, dth = ref_bwd(q, k, st)
    st2, y2 = new_fwd()
    ds2, bcg2, dx2, ends2, dth2 = new_bwd(st2)
    names = ["states", "y", "dstates", "dB_re", "dB_im", "dC_re", "dC_im", "dx", "da", "kdk", "gs", "dtheta"]
    return {n: rel_diff(a, b) for n, a, b in zip(names, flat(st2, y2, ds2, bcg2, dx2, ends2, dth2), flat(st, y, ds, bcg, dx, ends, dth))}


def check():
    "Interpreter, fp32: T = 88 (five and a half chunks of 16), two heads, N = 8, D = 16."
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    Q = 16
    x, bc, alpha, cos, sin, dy = inputs(2, 88, 2, 8, 16, Q, torch.float32, "cpu")
    tiles = dict(BM=16, BD=16, num_warps=4, num_stages=1)
    ref = package_chain(x, bc, alpha, cos, sin, dy, Q, TUNE, None)
    new = rotated_chain(x, bc, alpha, cos, sin, dy, Q, tiles, tiles, dict(BC=16, BD=16))
    diffs = compare(*ref, *new)
    print({k: f"{v:.1e}" for k, v in diffs.items()})
    worst = max(diffs.values())
    if worst > 1e-5: sys.exit(f"exp_rotate_on_load --check: largest relative difference {worst:.1e} > 1e-5")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true"); p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=2048); p.add_argument("--rounds", type=int, default=5); p.add_argument("--out")
    a = p.parse_args()
    if a.check: return check()
    if not torch.cuda.is_available(): sys.exit("exp_rotate_on_load: needs a CUDA GPU (or --check)")
    from common import emit, queued_ms
    from mamba3_lite.ssd.triton.phases import device_capability
    from mamba3_lite.ssd.triton.real_ssd import tune_for, state_blocks, batch_head_pairs, scan_y_blocks
    Q, H, N, D = 64, 16, 64, 64
    x, bc, alpha, cos, sin, dy = inputs(a.batch, a.seq, H, N, D, Q, torch.bfloat16, "cuda")
    tune = tune_for(device_capability(x))
    pairs = batch_head_pairs(x)
    ref_fwd, ref_bwd = package_chain(x, bc, alpha, cos, sin, dy, Q, tune, pairs)
    q, k, st, _ = ref_fwd()
    fwd_tiles, bwd_tiles = state_blocks(tune, pairs), state_blocks(tune, pairs, backward=True)
    scans = {"package": scan_y_blocks(tune), "2 stages": {**scan_y_blocks(tune), "num_stages": 2},
             "no cap": {**scan_y_blocks(tune), "maxnreg": None}, "8 warps": {**scan_y_blocks(tune), "num_warps": 8, "maxnreg": None}}
    forms = {"package": (ref_fwd, lambda: ref_bwd(q, k, st))}
    for name, scan in scans.items():
        nf, nb = rotated_chain(x, bc, alpha, cos, sin, dy, Q, fwd_tiles, bwd_tiles, scan)
        forms[f"rotated, scan {name}"] = (nf, lambda nb=nb: nb(st))
    diffs = compare(ref_fwd, ref_bwd, *rotated_chain(x, bc, alpha, cos, sin, dy, Q, fwd_tiles, bwd_tiles, scans["package"]))
    from mamba3_lite.ssd.triton.phases import rotate_forward
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    from mamba3_lite.ssd.triton.chunk_scan import scan_y, scan_backward_chunk
    dstates = ref_bwd(q, k, st)[0]
    kernels = {   # each kernel alone, queued
        "package rotate": lambda: rotate_forward(*bc, cos, sin, x.dtype, block_rows=tune["BR_rot"]),
        "package state forward": lambda: states_forward(k, x, alpha, None, Q, **fwd_tiles),
        "package scan_y": lambda: scan_y(q, k, x, alpha, st, Q, **scan_y_blocks(tune)),
        "package state reverse": lambda: states_backward(q, dy, alpha, None, Q, st.dtype, **bwd_tiles),
        "package bwd_chunk": lambda: scan_backward_chunk(q, k, x, dy, alpha, st, dstates, Q, cos, sin, x.dtype,
                                                         num_warps=tune["warps_chunk"], num_stages=tune["stages_chunk"], end_terms_apart=True),
        "rotated state forward": lambda: states_rot(bc[0], bc[1], cos, sin, x, alpha, Q, False, **fwd_tiles),
        "rotated state reverse": lambda: states_rot(bc[2], bc[3], cos, sin, dy, alpha, Q, True, **bwd_tiles),
        "rotated bwd_chunk": lambda: backward_chunk_rot(bc, x, dy, alpha, st, dstates, cos, sin, Q),
        **{f"rotated scan_y, {n}": (lambda s=s: scan_y_rot(bc, cos, sin, x, alpha, st, Q, **s)) for n, s in scans.items()},
        **{f"rotated state {d}, BM {bm} BD {bd} w{w} s{s}": (lambda bm=bm, bd=bd, w=w, s=s, d=d: states_rot(
            *(bc[:2] if d == "forward" else bc[2:]), cos, sin, x if d == "forward" else dy, alpha, Q, d == "reverse",
            BM=bm, BD=bd, num_warps=w, num_stages=s))
           for d in ("forward", "reverse") for bm, bd, w, s in ((128, 64, 8, 2), (128, 32, 8, 2), (64, 64, 8, 3), (32, 64, 4, 3))},
    }
    times = {n: [] for n in [*forms, *kernels]}
    for _ in range(a.rounds):                      # interleaved rounds: the card's clock drifts alike for every row
        for n, (f, b) in forms.items():
            times[n].append(queued_ms(lambda: (f(), b())))
        for n, fn in kernels.items():
            times[n].append(queued_ms(fn))
    ms = {n: round(statistics.median(v), 4) for n, v in times.items()}
    emit({"shape": dict(Bsz=a.batch, T=a.seq, H=H, N=N, D=D, Q=Q, dtype="bf16", pairs=pairs),
          "tiles": {"state_forward": fwd_tiles, "state_reverse": bwd_tiles, "scans": scans},
          "ms_forward_and_backward": {n: ms[n] for n in forms}, "ms_kernel": {n: ms[n] for n in kernels},
          "rel_diff_rotated_vs_package": diffs}, device="cuda", out=a.out, benchmark="rotate_on_load")


if __name__ == "__main__":
    main()
