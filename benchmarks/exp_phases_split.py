"""The experiment behind 05a's split phase kernels. They used to run one program per (batch, head), each walking the
whole sequence (256 programs at B=16, H=16; 64 at the T=8192 shape, B=4) -- few programs on 132 SMs for a kernel
that moves a few MB. Split, each (batch, head) walk goes to `S` programs over consecutive tiles of chunks; a program
first sums the phase of the tiles before its own (forward) or the phase gradient of the tiles after it (backward),
tile by tile as one program would, so the forward and d(dt) are bit-identical to S=1, and dA_re/dA_im are summed over
S partial sums. The split was measured on 2026-12-03 (phases_split_h200.json) with this script's own copy of the
kernels, moved into 05a unchanged since; the script now launches 05a's kernels at each S (whatever
`tiles_per_program` would choose). Checked against S=1, then timed (CUDA graph of 20 calls) over S and the tile size,
at the 434M model's shapes. Prints one JSON record; `--check` runs only the parity check
(works under TRITON_INTERPRET=1). A second variant, `*_heads_kernel`, also takes HB heads a program (tiles of
(chunks, steps, heads)), so the heads of one step are read and written side by side instead of 4 bytes in a 32-byte
sector per program.

    python benchmarks/exp_phases_split.py --out benchmarks/results/phases_split_h200.json
    python benchmarks/exp_phases_split.py --launchers --out benchmarks/results/phase_sums_h200.json

Since the split's first measurement a split *forward* program no longer walks the tiles before its own: 05a's
`tile_sums_kernel` sums every tile's phase in one parallel launch first and the program adds those sums up (the same
numbers in the same order). `--launchers` times the package's launchers (whichever package is imported) with
`PHASE_PROGRAMS` set to S*B*H: the backward's split is S; the forward's, today, one tile a program wherever S >= 2.
(`phase_sums_h200.json` was measured with the sums before both kernels and the forward split S ways: the forward
gained, 37.4 -> 30.3 us at S=4 and 26.2 at S=8, the backward lost, 26.8 -> 28.2 at S=4; the package keeps the sums
in the forward only.)
"""
import argparse, itertools, json, sys

import torch
import triton
import triton.language as tl

from mamba3_lite.ssd.triton import phases
from mamba3_lite.ssd.triton.phases import _softplus, block_size, phases_backward, phases_forward


@triton.jit(do_not_specialize=["T", "NC", "TPS"])
def fwd_heads_kernel(dt_ptr, are_ptr, aim_ptr, a_ptr, cos_ptr, sin_ptr, thend_ptr, sdb, sdt, sdh, T, H, Q, NC, TPS,
                     BQ: tl.constexpr, CB: tl.constexpr, HB: tl.constexpr):
    "The split forward with HB heads a program: tiles (CB, BQ, HB), so a step's heads are read and written side by side."
    pid, s = tl.program_id(0), tl.program_id(1)
    nhb = tl.cdiv(H, HB)
    b, h0 = pid // nhb, (pid % nhb) * HB
    offs, offs_c, offs_h = tl.arange(0, BQ), tl.arange(0, CB), tl.arange(0, HB)
    hh = h0 + offs_h                                                            # (HB,)
    mh = hh < H
    a_re = tl.load(are_ptr + hh, mask=mh, other=0.).to(tl.float32)[None, None, :]
    a_im = tl.load(aim_ptr + hh, mask=mh, other=0.).to(tl.float64)[None, None, :]
    two_pi = tl.full([], 6.283185307179586, tl.float64)
    carry = tl.zeros([HB], dtype=tl.float64)
    for c0 in range(0, s * TPS * CB, CB):
        c = (c0 + offs_c)[:, None, None]
        t = c * Q + offs[None, :, None]
        m = (c < NC) & (offs < Q)[None, :, None] & (t < T) & mh[None, None, :]
        x = tl.load(dt_ptr + b * sdb + t * sdt + hh[None, None, :] * sdh, mask=m, other=0.).to(tl.float32)
        sp = tl.where(m, _softplus(x), 0.0)
        carry += tl.sum(tl.sum(sp.to(tl.float64) * a_im, axis=1), axis=0)
    for c0 in range(s * TPS * CB, tl.minimum(NC, (s + 1) * TPS * CB), CB):
        c = (c0 + offs_c)[:, None, None]
        t = c * Q + offs[None, :, None]
        inq = (c < NC) & (offs < Q)[None, :, None] & mh[None, None, :]
        m = inq & (t < T)
        x = tl.load(dt_ptr + b * sdb + t * sdt + hh[None, None, :] * sdh, mask=m, other=0.).to(tl.float32)
        sp = tl.where(m, _softplus(x), 0.0)
        tl.store(a_ptr + (b * NC * Q + t) * H + hh[None, None, :], tl.cumsum(sp * a_re, axis=1), mask=inq)
        bb = sp.to(tl.float64) * a_im
        row = tl.sum(bb, axis=1)                                                # (CB, HB)
        th = carry[None, None, :] + (tl.cumsum(row, axis=0) - row)[:, None, :] + tl.cumsum(bb, axis=1)
        carry += tl.sum(row, axis=0)
        kk = (th / two_pi).to(tl.int64).to(tl.float64)
        kk = tl.where(kk * two_pi > th, kk - 1.0, kk)
        th32 = (th - kk * two_pi).to(tl.float32)
        tl.store(cos_ptr + (b * T + t) * H + hh[None, None, :], tl.cos(th32), mask=m)
        tl.store(sin_ptr + (b * T + t) * H + hh[None, None, :], tl.sin(th32), mask=m)
    if (s + 1) * TPS * CB >= NC:
        kk = (carry / two_pi).to(tl.int64).to(tl.float64)
        kk = tl.where(kk * two_pi > carry, kk - 1.0, kk)
        tl.store(thend_ptr + b * H + hh, (carry - kk * two_pi).to(tl.float32), mask=mh)


@triton.jit(do_not_specialize=["T", "NC", "TPS"])
def bwd_heads_kernel(dt_ptr, are_ptr, aim_ptr, da_ptr, dth_ptr, kdk_ptr, gs_ptr, a_ptr, ddt_ptr, dare_ptr, daim_ptr,
                     sdb, sdt, sdh, sob, sot, soh, T, H, Q, NC, TPS, BQ: tl.constexpr, CB: tl.constexpr, HB: tl.constexpr):
    "The split backward with HB heads a program (tiles (CB, BQ, HB)); partial dA per (split, batch, head)."
    pid, s = tl.program_id(0), tl.program_id(1)
    nhb = tl.cdiv(H, HB)
    b, h0 = pid // nhb, (pid % nhb) * HB
    offs, offs_c, offs_h = tl.arange(0, BQ), tl.arange(0, CB), tl.arange(0, HB)
    hh = h0 + offs_h
    mh = hh < H
    h3 = hh[None, None, :]
    a_re = tl.load(are_ptr + hh, mask=mh, other=0.).to(tl.float32)[None, None, :]
    a_im = tl.load(aim_ptr + hh, mask=mh, other=0.).to(tl.float64)[None, None, :]
    carry, acc_re, acc_im = tl.zeros([HB], dtype=tl.float64), tl.zeros([HB], dtype=tl.float64), tl.zeros([HB], dtype=tl.float64)
    n_tiles = tl.cdiv(NC, CB)
    lo, hi = s * TPS, tl.minimum(n_tiles, (s + 1) * TPS)
    for i in range(0, n_tiles - hi):
        c = ((n_tiles - 1 - i) * CB + offs_c)[:, None, None]
        t = c * Q + offs[None, :, None]
        m = (c < NC) & (offs < Q)[None, :, None] & (t < T) & mh[None, None, :]
        g = tl.load(dth_ptr + (b * NC * Q + t) * H + h3, mask=m, other=0.).to(tl.float64)
        carry += tl.sum(tl.sum(g, axis=1), axis=0)
    for i in range(n_tiles - hi, n_tiles - lo):
        c = ((n_tiles - 1 - i) * CB + offs_c)[:, None, None]
        t = c * Q + offs[None, :, None]
        inq = (c < NC) & (offs < Q)[None, :, None] & mh[None, None, :]
        m = inq & (t < T)
        x = tl.load(dt_ptr + b * sdb + t * sdt + h3 * sdh, mask=m, other=0.).to(tl.float32)
        sp = tl.where(m, _softplus(x), 0.0)
        da = tl.load(da_ptr + (b * NC * Q + t) * H + h3, mask=inq, other=0.)
        kd = tl.load(kdk_ptr + (b * NC * Q + t) * H + h3, mask=inq, other=0.)
        mc = (c < NC) & mh[None, None, :]
        ae = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h3, mask=mc, other=0.)
        gv = tl.load(gs_ptr + (b * NC + c) * H + h3, mask=mc, other=0.)
        da += tl.where(offs[None, :, None] == Q - 1, tl.sum(kd, axis=1)[:, None, :] + tl.exp(ae) * gv, 0.)
        a_suf = tl.sum(da, axis=1)[:, None, :] - tl.cumsum(da, axis=1) + da
        g = tl.load(dth_ptr + (b * NC * Q + t) * H + h3, mask=m, other=0.).to(tl.float64)
        row = tl.sum(g, axis=1)                                                 # (CB, HB)
        later = tl.sum(row, axis=0)[None, :] - tl.cumsum(row, axis=0)
        th_suf = carry[None, None, :] + (later + row)[:, None, :] - tl.cumsum(g, axis=1) + g
        carry += tl.sum(row, axis=0)
        dsp = a_re * a_suf + (a_im * th_suf).to(tl.float32)
        sig = 1.0 / (1.0 + tl.exp(-x))
        tl.store(ddt_ptr + b * sob + t * sot + h3 * soh, (dsp * sig).to(ddt_ptr.dtype.element_ty), mask=m)
        acc_re += tl.sum(tl.sum((sp * a_suf).to(tl.float64), axis=1), axis=0)
        acc_im += tl.sum(tl.sum(sp.to(tl.float64) * th_suf, axis=1), axis=0)
    nb = tl.num_programs(0) // nhb
    tl.store(dare_ptr + (s * nb + b) * H + hh, acc_re.to(tl.float32), mask=mh)
    tl.store(daim_ptr + (s * nb + b) * H + hh, acc_im.to(tl.float32), mask=mh)


def heads_forward(dt, A_re, A_im, Q, CB, S, HB, warps=4):
    Bsz, T, H = dt.shape
    NC = triton.cdiv(T, Q); TPS = triton.cdiv(triton.cdiv(NC, CB), S)
    f32 = dict(dtype=torch.float32, device=dt.device)
    alpha, cos, sin, th_end = torch.empty(Bsz, NC * Q, H, **f32), torch.empty(Bsz, T, H, **f32), torch.empty(Bsz, T, H, **f32), torch.empty(Bsz, H, **f32)
    grid = (Bsz * triton.cdiv(H, HB), triton.cdiv(triton.cdiv(NC, CB), TPS))
    fwd_heads_kernel[grid](dt, A_re, A_im, alpha, cos, sin, th_end, *dt.stride(), T, H, Q, NC, TPS, BQ=block_size(Q),
                           CB=CB, HB=HB, num_warps=warps)
    return alpha, cos, sin, th_end


def heads_backward(dt, A_re, A_im, dalpha, dtheta, kdk, gs, alpha, Q, CB, S, HB, warps=4):
    Bsz, T, H = dt.shape
    NC = dalpha.shape[1] // Q; TPS = triton.cdiv(triton.cdiv(NC, CB), S); S = triton.cdiv(triton.cdiv(NC, CB), TPS)
    ddt = torch.empty(Bsz, T, H, dtype=dt.dtype, device=dt.device)
    dare, daim = (torch.empty(S, Bsz, H, dtype=torch.float32, device=dt.device) for _ in range(2))
    bwd_heads_kernel[(Bsz * triton.cdiv(H, HB), S)](dt, A_re, A_im, dalpha, dtheta, kdk, gs, alpha, ddt, dare, daim,
                                                     *dt.stride(), *ddt.stride(), T, H, Q, NC, TPS, BQ=block_size(Q), CB=CB,
                                                     HB=HB, num_warps=warps)
    return ddt, dare.sum((0, 1)), daim.sum((0, 1))


def split_forward(dt, A_re, A_im, Q, CB, S, warps=4):
    "05a's forward kernel with S programs per (b, h), whatever `tiles_per_program` would choose."
    Bsz, T, H = dt.shape
    NC = triton.cdiv(T, Q); TPS = triton.cdiv(triton.cdiv(NC, CB), S)
    f32 = dict(dtype=torch.float32, device=dt.device)
    alpha, cos, sin, th_end = torch.empty(Bsz, NC * Q, H, **f32), torch.empty(Bsz, T, H, **f32), torch.empty(Bsz, T, H, **f32), torch.empty(Bsz, H, **f32)
    alpha_lo = torch.empty_like(alpha)                                        # the pair's low part (05a, since 2026-12-05)
    S = triton.cdiv(triton.cdiv(NC, CB), TPS)
    sums = phases.tile_sums(dt, A_im, Q, CB, S)
    phases.phases_fwd_kernel[(Bsz * H, S)](dt, A_re, A_im, sums, alpha, alpha_lo, cos, sin, th_end, *dt.stride(), T, H, Q,
                                           NC, TPS, BQ=block_size(Q), CB=CB, num_warps=warps)
    return alpha, cos, sin, th_end


def split_backward(dt, A_re, A_im, dalpha, dtheta, kdk, gs, alpha, Q, CB, S, warps=4):
    "05a's backward kernel (end terms, no dtheta_end) with S programs per (b, h)."
    Bsz, T, H = dt.shape
    NC = dalpha.shape[1] // Q; TPS = triton.cdiv(triton.cdiv(NC, CB), S); S = triton.cdiv(triton.cdiv(NC, CB), TPS)
    ddt = torch.empty(Bsz, T, H, dtype=dt.dtype, device=dt.device)
    dare, daim = (torch.empty(S, Bsz, H, dtype=torch.float32, device=dt.device) for _ in range(2))
    phases.phases_bwd_kernel[(Bsz * H, S)](dt, A_re, A_im, dalpha, dtheta, dare, kdk, gs, alpha, ddt, dare, daim,
                                           *dt.stride(), *ddt.stride(), T, H, Q, NC, TPS, HAS_DTHEND=False, HAS_END=True,
                                           BQ=block_size(Q), CB=CB, num_warps=warps)
    return ddt, dare.sum((0, 1)), daim.sum((0, 1))


def inputs(Bsz, T, H, Q, F, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    NC = triton.cdiv(T, Q)
    proj = torch.randn(Bsz, T, F, device=dev, generator=g).bfloat16()
    dt = proj[..., F - H:]
    A_re, A_im = -torch.rand(H, device=dev, generator=g), 30 * torch.randn(H, device=dev, generator=g)
    da, dth, kdk = (torch.randn(Bsz, NC * Q, H, generator=g, device=dev) for _ in range(3))
    dth[:, T:] = 0
    gs = torch.randn(Bsz, NC, H, generator=g, device=dev)
    return dt, A_re, A_im, da, dth, kdk, gs


def rel(u, v) -> float:
    return float((u.float() - v.float()).abs().max() / v.float().abs().max())


def check(dev, Bsz=2, T=1000, H=3, Q=16, F=40):
    dt, A_re, A_im, da, dth, kdk, gs = inputs(Bsz, T, H, Q, F, dev)
    ref = split_forward(dt, A_re, A_im, Q, 4, 1)                                # one program per (b, h)
    ref_b = split_backward(dt, A_re, A_im, da, dth, kdk, gs, ref[0], Q, 4, 1)
    out = []
    for S in (1, 2, 3, 5, 16):
        got = split_forward(dt, A_re, A_im, Q, 4, S)
        same = all(torch.equal(u, v) for u, v in zip(got, ref))
        gb = split_backward(dt, A_re, A_im, da, dth, kdk, gs, ref[0], Q, 4, S)
        diff = [rel(u, v) for u, v in zip(gb, ref_b)]
        out.append(dict(S=S, forward_bit_identical=same, ddt_bit_identical=torch.equal(gb[0], ref_b[0]),
                        backward_rel_diff=[f"{d:.1e}" for d in diff]))
        for HB in (2, 4):                     # H=3: a ragged head block too
            got = heads_forward(dt, A_re, A_im, Q, 4, S, HB)
            gb = heads_backward(dt, A_re, A_im, da, dth, kdk, gs, ref[0], Q, 4, S, HB)
            out.append(dict(S=S, HB=HB, forward_rel_diff=[f"{rel(u, v):.1e}" for u, v in zip(got, ref)],
                            backward_rel_diff=[f"{rel(u, v):.1e}" for u, v in zip(gb, ref_b)]))
    return out


def launchers(dev, splits=(1, 2, 4, 8)):
    """05a's launchers as a step calls them (`phases_forward`, `phases_backward` with 05c's end terms) with
    `PHASE_PROGRAMS` set to S*B*H (how each splits at that setting is the imported package's `tiles_per_program`): the
    figure for whichever package is imported, so one lease can time two commits' packages. Outputs against S=1's
    (forward and d(dt): bit for bit)."""
    from common import graph_ms
    rows, saved = [], phases.PHASE_PROGRAMS
    for Bsz, T in ((16, 2048), (4, 8192)):
        dt, A_re, A_im, da, dth, kdk, gs = inputs(Bsz, T, 16, 64, 5136, dev)
        fwd = lambda: phases_forward(dt, A_re, A_im, 64)
        bwd = lambda: phases_backward(dt, A_re, A_im, da, dth, None, 64, end_terms=(kdk, gs, alpha))
        for S in splits:
            phases.PHASE_PROGRAMS = S * Bsz * 16
            alpha = fwd()[0]
            if S == 1: ref_f, ref_b = fwd(), bwd()
            f, b = fwd(), bwd()
            rows.append(dict(B=Bsz, T=T, S=S, fwd_us=round(1e3 * graph_ms(fwd), 2), bwd_us=round(1e3 * graph_ms(bwd), 2),
                             forward_bit_identical=all(torch.equal(u, v) for u, v in zip(f, ref_f)),
                             ddt_bit_identical=torch.equal(b[0], ref_b[0]),
                             dA_rel_diff=[f"{rel(u, v):.1e}" for u, v in zip(b[1:], ref_b[1:])]))
            print(json.dumps(rows[-1]), flush=True)
    phases.PHASE_PROGRAMS = saved
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); p.add_argument("--check", action="store_true")
    p.add_argument("--launchers", action="store_true", help="only `launchers` (any package version; a GPU)")
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if a.launchers:
        if dev.type != "cuda": sys.exit("exp_phases_split: timing needs a CUDA GPU")
        from common import emit
        return emit({"shape": "H=16, chunk 64, dt a slice of the in_proj output (B, T, 5136), bf16",
                     "package": phases.__file__, "rows": launchers(dev)}, device=dev, out=a.out, benchmark="phases_launchers")
    parity = check(dev); print(json.dumps(parity), flush=True)
    ok = all(r.get("forward_bit_identical", True) and r.get("ddt_bit_identical", True)
             and max(map(float, r["backward_rel_diff"] + r.get("forward_rel_diff", []))) < 1e-5 for r in parity)
    if a.check: sys.exit(0 if ok else "exp_phases_split: the split kernels differ from the package's")
    if dev.type != "cuda": sys.exit("exp_phases_split: timing needs a CUDA GPU")
    from common import emit, graph_ms
    rows = []
    for Bsz, T in ((16, 2048), (4, 8192)):
        dt, A_re, A_im, da, dth, kdk, gs = inputs(Bsz, T, 16, 64, 5136, dev)
        alpha = phases_forward(dt, A_re, A_im, 64)[0]
        rows.append(dict(B=Bsz, T=T, path="package", fwd_us=round(1e3 * graph_ms(lambda: phases_forward(dt, A_re, A_im, 64)), 2),
                         bwd_us=round(1e3 * graph_ms(lambda: phases_backward(dt, A_re, A_im, da, dth, None, 64, end_terms=(kdk, gs, alpha))), 2)))
        print(json.dumps(rows[-1]), flush=True)
        for CB, S, warps in itertools.product((2, 4, 8, 16), (1, 2, 4, 8, 16, 32), (1, 2, 4)):
            if S * CB > T // 64: continue
            r = dict(B=Bsz, T=T, path="split", CB=CB, S=S, warps=warps,
                     fwd_us=round(1e3 * graph_ms(lambda: split_forward(dt, A_re, A_im, 64, CB, S, warps)), 2),
                     bwd_us=round(1e3 * graph_ms(lambda: split_backward(dt, A_re, A_im, da, dth, kdk, gs, alpha, 64, CB, S, warps)), 2))
            rows.append(r); print(json.dumps(r), flush=True)
        for HB, CB, S, warps in itertools.product((4, 16), (1, 2, 4), (1, 4, 8, 16, 32), (2, 4, 8)):
            if S * CB > T // 64: continue
            r = dict(B=Bsz, T=T, path="heads", HB=HB, CB=CB, S=S, warps=warps,
                     fwd_us=round(1e3 * graph_ms(lambda: heads_forward(dt, A_re, A_im, 64, CB, S, HB, warps)), 2),
                     bwd_us=round(1e3 * graph_ms(lambda: heads_backward(dt, A_re, A_im, da, dth, kdk, gs, alpha, 64, CB, S, HB, warps)), 2))
            rows.append(r); print(json.dumps(r), flush=True)
    emit({"shape": "H=16, chunk 64, dt a slice of the in_proj output (B, T, 5136), bf16", "parity": parity, "rows": rows},
         device=dev, out=a.out, benchmark="phases_split")


if __name__ == "__main__":
    main()
