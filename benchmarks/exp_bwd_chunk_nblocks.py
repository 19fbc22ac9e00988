"""Could chapter 05c's one-kernel backward hold fewer registers by walking the state dimension in blocks? An experiment,
not a kernel of the package.

`bwd_chunk_kernel` keeps whole (64 x 64) tiles of q and k (both halves of M), of the states S and G and of the
gradients dq, dk live at once: 255 registers and a few spilled bytes, two programs an SM, its products not overlapping
its loads (`exp_bwd_chunk_floor.py`: 0.43 ms a call where its traffic alone takes 0.27). Every output but dx pairs
only the two halves of one state index n (the rotation's transpose, q.dq, dq.Jq, k.dk), so the n axis can be walked in
`SPLIT` blocks of NH/SPLIT indices, each block's tiles live only inside its iteration; dx = (P o L)^T dy + w (k G) sums
over n. `LOOPS` 1: one walk does everything, dx's two sums accumulated across it in fp32; 2: dq and dk in one walk,
dx's sums in a second that reloads q, k and G; 3: dq, then dk, then dx's sums, each walk its own (q, k, G read three
times: the repeats ~80 KB a program from L2, against ~125 KB from memory once); 4: dq, then dk with dx's sums; 5: dq,
then dk with dx summed block by block, (P_n o L)^T dy + w k_n G_n (SPLIT products where the others make one; no P
held across a walk). dA = (dy x^T) o L is computed once
before the walks, L again after them. `RELOAD`: x and dy read again where next needed instead of held. Compiled for
sm_90 (`--aot`; triton 3.6, the H200 machine's: `results/bwd_chunk_nblocks_aot_sm90_triton36.json`; 3.9, this
machine's: `..._sm90.json`): SPLIT 4, LOOPS 3 at 4 warps holds 182 registers and spills nothing; capped at 168
(`maxnreg`: three programs an SM instead of two) it spills 56 bytes (48 with 3.9), where the package kernel spills
840 (1,000). Whether that buys time, only a GPU says.

Locally (no GPU): `--check` runs the variants in Triton's interpreter against the package kernel in fp32 (uneven T
and NH, and the model's tiles; `results/bwd_chunk_nblocks_interpreter.json`); `--aot` compiles them for sm_90 and reports registers, spilled bytes and shared
memory (`aot_kernel_resources.py`'s way). On a GPU: each variant against the real kernel at the 434M model's
training shape, outputs compared and timed in `--rounds` interleaved rounds of 20 queued calls.

    python benchmarks/exp_bwd_chunk_nblocks.py --check                  # a CPU: the interpreter
    python benchmarks/exp_bwd_chunk_nblocks.py --aot                    # a CPU: compiled for sm_90
    python benchmarks/exp_bwd_chunk_nblocks.py --out benchmarks/results/bwd_chunk_nblocks_h200.json   # an H200

The package has since taken the LOOPS 3 order, dx's two sums then in a walk each (162 registers unspilled at SPLIT 4,
4 warps), as chapter 05c's walked form (`mamba3_lite.ssd.triton.chunk_walk`, opt-in by 05d's `TUNE["walk_split"]`);
the GPU run times it too (`PACKAGE_WALK_CONFIGS`).
"""
import argparse, os, statistics, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE); sys.path.insert(0, os.path.dirname(HERE))
if "--check" in sys.argv: os.environ["TRITON_INTERPRET"] = "1"      # before triton is imported

import torch
import triton
import triton.language as tl

from mamba3_lite.ssd.triton.phases import dot
from mamba3_lite.ssd.triton.chunk_walk import qk_halves


@triton.jit
def state_block(st_ptr, b, c, h, n, offs_d, NH, D, NC, H):
    "Both halves (rows n, NH + n) of one chunk's state (S or G) for block n: two (NB, BD) tiles."
    so = ((b * NC + c) * H + h) * 2 * NH * D + n[:, None] * D + offs_d[None, :]
    m = (n < NH)[:, None] & (offs_d < D)[None, :]
    return tl.load(st_ptr + so, mask=m, other=0.), tl.load(st_ptr + so + NH * D, mask=m, other=0.)


@triton.jit
def dx_sums(q1, q2, k1, k2, G1, G2, F64: tl.constexpr, PREC: tl.constexpr):
    "Block n's share of dx's two sums over n: q k^T (BQ, BQ) and k G (BQ, BD)."
    return (dot(q1, tl.trans(k1), F64, PREC) + dot(q2, tl.trans(k2), F64, PREC),
            dot(k1, G1.to(k1.dtype), F64, PREC) + dot(k2, G2.to(k2.dtype), F64, PREC))


@triton.jit
def dk_block(xs, dA, q1, q2, k1, k2, G1, G2, w, co, si, o3, o4, mask, F64: tl.constexpr, PREC: tl.constexpr):
    """dk of one block of n (its chunk-state part w x G^T, then dA^T q), stored rotated at o3, o4; returns the block's
    k . dk_state, k . dk and dk . Jk per row."""
    dk1 = dot(xs, tl.trans(G1.to(xs.dtype)), F64, PREC) * w
    dk2 = dot(xs, tl.trans(G2.to(xs.dtype)), F64, PREC) * w
    k1f, k2f = k1.to(dk1.dtype), k2.to(dk1.dtype)
    kdk = tl.sum(k1f * dk1 + k2f * dk2, axis=1)
    dk1 += dot(tl.trans(dA), q1, F64, PREC)
    dk2 += dot(tl.trans(dA), q2, F64, PREC)
    ty = o3.dtype.element_ty
    tl.store(o3, (co * dk1 + si * dk2).to(ty), mask=mask)
    tl.store(o4, (si * dk1 - co * dk2).to(ty), mask=mask)
    return kdk, tl.sum(k1f * dk1 + k2f * dk2, axis=1), tl.sum(k1f * dk2 - k2f * dk1, axis=1)


@triton.jit(do_not_specialize=["T", "NC"])
def nblock_kernel(q_ptr, k_ptr, x_ptr, dy_ptr, a_ptr, st_ptr, dst_ptr, cos_ptr, sin_ptr,
                  o1_ptr, o2_ptr, o3_ptr, o4_ptr, dx_ptr, da_ptr, kdk_ptr, gs_ptr, dth_ptr,
                  sqb, sqt, sqh, skb, skt, skh, sxb, sxt, sxh, sdb, sdt, sdh, sob, sot, soh, sgb, sgt, sgh,
                  T, H, NH, D, Q, NC, ROTATE: tl.constexpr, WITH_DX: tl.constexpr, F64: tl.constexpr,
                  PREC: tl.constexpr, BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
                  SPLIT: tl.constexpr, LOOPS: tl.constexpr, RELOAD: tl.constexpr):
    """bwd_chunk_kernel's outputs (ROTATE and WITH_DX only), the state index n walked in SPLIT blocks of BN // SPLIT:
    LOOPS 1: one walk for everything; 2: dq and dk, then dx's sums; 3: dq, then dk, then dx's sums (q, k, G reloaded);
    4: dq, then dk with dx's sums; 5: dq, then dk with dx itself summed block by block ((P_n o L)^T dy: SPLIT products
    where the others make one, but no P held across the walk).
    RELOAD: x and dy loaded again where they are next needed instead of held in registers."""
    pid = tl.program_id(0)
    h, c, b = pid % H, (pid // H) % NC, pid // (H * NC)
    offs, offs_b, offs_d = tl.arange(0, BQ), tl.arange(0, BN // SPLIT), tl.arange(0, BD)
    t = c * Q + offs
    mt, mdd = (offs < Q) & (t < T), offs_d < D
    mtd = mt[:, None] & mdd[None, :]
    a = tl.load(a_ptr + (b * NC * Q + t) * H + h, mask=offs < Q, other=0.)
    a_end = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h)
    causal = (offs[:, None] >= offs[None, :]) & mt[None, :]
    w = tl.exp(tl.where(mt, a_end - a, float("-inf")))[:, None]
    ea = tl.exp(a)[:, None]
    xs = tl.load(x_ptr + b * sxb + t[:, None] * sxt + h * sxh + offs_d[None, :], mask=mtd, other=0.)
    dy = tl.load(dy_ptr + b * sdb + t[:, None] * sdt + h * sdh + offs_d[None, :], mask=mtd, other=0.)
    dA = (dot(dy, tl.trans(xs), F64, PREC) * tl.exp(tl.where(causal, a[:, None] - a[None, :], float("-inf")))
          ).to(xs.dtype)
    co = tl.load(cos_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    si = tl.load(sin_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    ty = o1_ptr.dtype.element_ty
    da = tl.zeros([BQ], dtype=w.dtype)
    dth = tl.zeros([BQ], dtype=w.dtype)
    kdk = tl.zeros([BQ], dtype=w.dtype)
    gs = tl.zeros([BN // SPLIT], dtype=w.dtype)
    P = tl.zeros([BQ, BQ], dtype=w.dtype)
    kG = tl.zeros([BQ, BD], dtype=w.dtype)
    for i in tl.range(SPLIT):                                  # dq (and with LOOPS < 3 dk, with LOOPS 1 dx's sums)
        n = i * (BN // SPLIT) + offs_b
        oo, mtn = b * sob + t[:, None] * sot + h * soh + n[None, :], mt[:, None] & (n < NH)[None, :]
        q1, q2, k1, k2 = qk_halves(q_ptr, k_ptr, b, h, t, n, mt, sqb, sqt, sqh, skb, skt, skh, NH)
        S1, S2 = state_block(st_ptr, b, c, h, n, offs_d, NH, D, NC, H)
        G1, G2 = state_block(dst_ptr, b, c, h, n, offs_d, NH, D, NC, H)
        gs += tl.sum(S1.to(w.dtype) * G1.to(w.dtype) + S2.to(w.dtype) * G2.to(w.dtype), axis=1)
        dq1 = dot(dA, k1, F64, PREC) + dot(dy, tl.trans(S1.to(xs.dtype)), F64, PREC) * ea
        dq2 = dot(dA, k2, F64, PREC) + dot(dy, tl.trans(S2.to(xs.dtype)), F64, PREC) * ea
        q1f, q2f = q1.to(dq1.dtype), q2.to(dq1.dtype)
        da += tl.sum(q1f * dq1 + q2f * dq2, axis=1)
        dth += tl.sum(q1f * dq2 - q2f * dq1, axis=1)
        tl.store(o1_ptr + oo, (co * dq1 + si * dq2).to(ty), mask=mtn)
        tl.store(o2_ptr + oo, (co * dq2 - si * dq1).to(ty), mask=mtn)
        if LOOPS == 1:
            P_n, kG_n = dx_sums(q1, q2, k1, k2, G1, G2, F64, PREC)
            P += P_n; kG += kG_n
        if LOOPS < 3:
            kdk_b, kdk_all, dth_b = dk_block(xs, dA, q1, q2, k1, k2, G1, G2, w, co, si, o3_ptr + oo, o4_ptr + oo, mtn,
                                             F64, PREC)
            kdk += kdk_b; da -= kdk_all; dth += dth_b
    if LOOPS >= 3:                                             # dk: q, k and G again, S not
        if RELOAD:                                             # x again (L2): not held in registers through dq's walk
            xs = tl.load(x_ptr + b * sxb + t[:, None] * sxt + h * sxh + offs_d[None, :], mask=mtd, other=0.)
        for i in tl.range(SPLIT):
            n = i * (BN // SPLIT) + offs_b
            oo, mtn = b * sob + t[:, None] * sot + h * soh + n[None, :], mt[:, None] & (n < NH)[None, :]
            q1, q2, k1, k2 = qk_halves(q_ptr, k_ptr, b, h, t, n, mt, sqb, sqt, sqh, skb, skt, skh, NH)
            G1, G2 = state_block(dst_ptr, b, c, h, n, offs_d, NH, D, NC, H)
            kdk_b, kdk_all, dth_b = dk_block(xs, dA, q1, q2, k1, k2, G1, G2, w, co, si, o3_ptr + oo, o4_ptr + oo, mtn,
                                             F64, PREC)
            kdk += kdk_b; da -= kdk_all; dth += dth_b
            if LOOPS == 4:                                     # dx's sums here, on the tiles dk's walk loaded
                P_n, kG_n = dx_sums(q1, q2, k1, k2, G1, G2, F64, PREC)
                P += P_n; kG += kG_n
            if LOOPS == 5:                                     # dx itself, block by block: (P_n o L)^T dy + w k_n G_n
                P_n, kG_n = dx_sums(q1, q2, k1, k2, G1, G2, F64, PREC)
                P_n *= tl.exp(tl.where(causal, a[:, None] - a[None, :], float("-inf")))
                kG += dot(tl.trans(P_n.to(dy.dtype)), dy, F64, PREC) + kG_n * w
    if LOOPS == 2 or LOOPS == 3:                               # dx's sums over n: k, q and G again
        for i in tl.range(SPLIT):
            n = i * (BN // SPLIT) + offs_b
            q1, q2, k1, k2 = qk_halves(q_ptr, k_ptr, b, h, t, n, mt, sqb, sqt, sqh, skb, skt, skh, NH)
            G1, G2 = state_block(dst_ptr, b, c, h, n, offs_d, NH, D, NC, H)
            P_n, kG_n = dx_sums(q1, q2, k1, k2, G1, G2, F64, PREC)
            P += P_n; kG += kG_n
    if LOOPS == 5:
        dx = kG                                                # already dx: the walk summed it
    else:
        L = tl.exp(tl.where(causal, a[:, None] - a[None, :], float("-inf")))
        if RELOAD:                                             # dy again (L2): not held through the walks
            dy = tl.load(dy_ptr + b * sdb + t[:, None] * sdt + h * sdh + offs_d[None, :], mask=mtd, other=0.)
        dx = dot(tl.trans((P * L).to(dy.dtype)), dy, F64, PREC) + kG * w
    tl.store(dx_ptr + b * sgb + t[:, None] * sgt + h * sgh + offs_d[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mtd)
    part = (b * NC * Q + c * Q + offs) * H + h
    tl.store(da_ptr + part, da, mask=offs < Q)
    tl.store(kdk_ptr + part, kdk, mask=offs < Q)
    tl.store(dth_ptr + part, dth, mask=offs < Q)
    tl.store(gs_ptr + (b * NC + c) * H + h, tl.sum(gs, axis=0))


VARIANTS = {f"split={s} loops={n}" + (" reload" if r else ""): dict(SPLIT=s, LOOPS=n, RELOAD=r)
            for s in (2, 4) for n in (1, 2, 3, 4, 5) for r in (False, True) if n == 3 or not r}


def run_variant(q, k, x, dy, alpha, states, dstates, cos, sin, Q, consts, num_warps=4, num_stages=1, maxnreg=None,
                info=None):
    """The variant's outputs as `scan_backward_chunk` gives them: (dB_re, dB_im, dC_re, dC_im), dx, (da, kdk, gs), dth.
    `info`: a dict that receives the launched kernel (its registers and spills) under "kernel"."""
    from mamba3_lite.ssd.triton.phases import block_size, dot_precision, strides3 as s3
    Bsz, T, H, M = q.shape
    D, NC, NH = x.shape[-1], alpha.shape[1] // Q, M // 2
    outs = [torch.empty(Bsz, T, H, NH, dtype=q.dtype, device=q.device) for _ in range(4)]   # dC_re, dC_im, dB_re, dB_im
    dx = torch.empty_like(dy)
    da, kdk, dth = (torch.empty(Bsz, NC * Q, H, dtype=alpha.dtype, device=q.device) for _ in range(3))
    gs = torch.empty(Bsz, NC, H, dtype=alpha.dtype, device=q.device)
    launched = nblock_kernel[(Bsz * NC * H,)](q, k, x, dy, alpha, states, dstates, cos, sin, *outs, dx, da, kdk, gs, dth,
                                   *s3(q), *s3(k), *s3(x), *s3(dy), *s3(outs[0]), *s3(dx), T, H, NH, D, Q, NC,
                                   ROTATE=True, WITH_DX=True, F64=False, PREC=dot_precision(q.dtype), BQ=block_size(Q),
                                   BN=block_size(NH), BD=block_size(D), **consts, num_warps=num_warps,
                                   num_stages=num_stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    if info is not None: info["kernel"] = launched
    return (outs[2], outs[3], outs[0], outs[1]), dx, (da, kdk, gs), dth


def flat(res):
    "The outputs as one list of tensors, in a fixed order."
    bc, dx, pieces, dth = res
    return [*bc, dx, *pieces, dth]


def check(seed=0) -> dict:
    """Each variant against the package kernel in the interpreter, in fp32 (uneven T and NH; the model's 64-wide tiles):
    max |diff| / max |ref| per variant, asserted below 1e-5."""
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk
    g = torch.Generator().manual_seed(seed)
    out = {}
    # fp32 only: triton 3.9's interpreter does not give the package kernel's own bf16 results (1e9 from its fp32
    # ones on the same inputs), so a bf16 comparison here would compare two wrong answers; bf16 is the GPU run's
    for Bsz, T, H, NH, D, Q, dt in ((1, 80, 2, 12, 16, 32, torch.float32), (2, 64, 1, 16, 8, 16, torch.float32),
                                    (1, 160, 1, 64, 64, 64, torch.float32)):    # uneven T and NH; the model's tiles
        NC = -(-T // Q)
        r = lambda *s: torch.randn(*s, generator=g).to(dt)
        q, k, x, dy = r(Bsz, T, H, 2 * NH), r(Bsz, T, H, 2 * NH), r(Bsz, T, H, D), r(Bsz, T, H, D)
        steps = -torch.rand(Bsz, NC, Q, H, generator=g) * 0.3
        alpha = steps.cumsum(2).reshape(Bsz, NC * Q, H).contiguous()
        states, dstates = r(Bsz, NC, H, 2 * NH, D), r(Bsz, NC, H, 2 * NH, D)
        th = torch.rand(Bsz, T, H, generator=g) * 6.28
        cos, sin = th.cos(), th.sin()
        ref = flat(scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, dt,
                                       end_terms_apart=True))
        for name, consts in VARIANTS.items():
            got = flat(run_variant(q, k, x, dy, alpha, states, dstates, cos, sin, Q, consts))
            diff = max(((o.float() - e.float()).abs().max() / e.float().abs().max()).item() for o, e in zip(got, ref))
            out[f"{name} @ B={Bsz} T={T} H={H} NH={NH} D={D} Q={Q} {str(dt)[6:]}"] = diff
            assert diff < 1e-5, (name, diff)
    return out


def aot() -> list:
    "Registers, spilled bytes and shared memory of the package kernel and each variant compiled for sm_90, by warps and register cap."
    os.environ.pop("TRITON_INTERPRET", None)
    from aot_kernel_resources import CONSTEXPRS, resources
    from mamba3_lite.ssd.triton.chunk_scan import bwd_chunk_kernel
    without_pair = {k: v for k, v in CONSTEXPRS.items() if k != "HAS_LO"}   # the variants predate 05a's pair
    rows = []
    for warps, cap in ((4, None), (4, 168), (4, 128), (8, None), (8, 128)):
        rows.append({"kernel": "package bwd_chunk_kernel", "warps": warps, "maxnreg": cap,
                     **resources(bwd_chunk_kernel, 90, warps, 1, constexprs={**CONSTEXPRS, "HAS_LO": False},
                                 maxnreg=cap)})
        rows += [{"kernel": name, "warps": warps, "maxnreg": cap,
                  **resources(nblock_kernel, 90, warps, 1, constexprs={**without_pair, **consts}, maxnreg=cap)}
                 for name, consts in VARIANTS.items()]
    return rows


# (SPLIT, LOOPS, warps, maxnreg): the AOT figures' candidates (`--aot` with triton 3.6, the H200 machine's:
# results/bwd_chunk_nblocks_aot_sm90_triton36.json), e.g. SPLIT 4, LOOPS 3 at 4 warps holds 182 registers unspilled
# (168 with 56 bytes spilled: three programs an SM instead of two); SPLIT 2, LOOPS 3 at 8 warps capped at 128 spills
# 56 bytes (two programs of 8 warps an SM instead of one)
GPU_CONFIGS = [(4, 3, 4, None), (4, 3, 4, 168), (4, 3, 4, 128), (4, 3, 8, None), (4, 3, 8, 128),
               (4, 2, 4, None), (4, 2, 4, 168), (4, 2, 8, None),
               (2, 3, 4, None), (2, 3, 4, 168), (2, 3, 8, None), (2, 3, 8, 128), (2, 2, 4, None), (2, 2, 8, 128),
               (4, 1, 4, None), (4, 5, 4, None), (4, 5, 4, 168)]


# (split, warps, maxnreg) of the package's own walked kernel (chapter 05c, continued: `scan_backward_walked`; sm_90,
# triton 3.6: 162 registers unspilled at split 4, 104 bytes spilled at 128 — four programs an SM), timed beside the variants
PACKAGE_WALK_CONFIGS = [(4, 4, None), (4, 4, 128), (2, 4, None), (2, 4, 168)]


def on_gpu(rounds: int) -> dict:
    """Each of GPU_CONFIGS and PACKAGE_WALK_CONFIGS against the real kernel at the training shape: max rel. diff of the
    outputs, ms a call."""
    from common import queued_ms, rel_diff, rotated_backward_inputs, TRAINING_SHAPE
    from bench_kernel_regs import compiled_info
    from mamba3_lite.ssd.triton import chunk_scan
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    Q = TRAINING_SHAPE["Q"]
    ins = rotated_backward_inputs()
    real = lambda: flat(chunk_scan.scan_backward_chunk(*ins[:7], Q, *ins[7:], torch.bfloat16,
                                                       num_warps=TUNE["warps_chunk"], num_stages=TUNE["stages_chunk"],
                                                       end_terms_apart=True))
    ref = real()
    fns, rows = {"real bwd_chunk_kernel": real}, {"real bwd_chunk_kernel": {"ms_rounds": []}}
    for split, loops, warps, maxnreg in GPU_CONFIGS:
        key = f"split={split} loops={loops}, {warps} warps, maxnreg {maxnreg}"
        info = {}
        fn = (lambda c=dict(SPLIT=split, LOOPS=loops, RELOAD=False), w=warps, m=maxnreg, i=info:
              flat(run_variant(*ins, Q, c, num_warps=w, maxnreg=m, info=i)))
        try:
            got = fn(); torch.cuda.synchronize()
            rows[key] = {"ms_rounds": [], "rel_diff": max(rel_diff(o, r) for o, r in zip(got, ref)),
                         "compiled": compiled_info(info["kernel"])}
            fns[key] = fn
        except Exception as err:
            rows[key] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    from mamba3_lite.ssd.triton.chunk_walk import scan_backward_walked
    for split, warps, maxnreg in PACKAGE_WALK_CONFIGS:
        key = f"package walked, split={split}, {warps} warps, maxnreg {maxnreg}"
        fn = (lambda s=split, w=warps, m=maxnreg:
              flat(scan_backward_walked(*ins[:7], Q, *ins[7:], torch.bfloat16, split=s, maxnreg=m, num_warps=w,
                                        num_stages=1, end_terms_apart=True)))
        try:
            got = fn(); torch.cuda.synchronize()
            rows[key] = {"ms_rounds": [], "rel_diff": max(rel_diff(o, r) for o, r in zip(got, ref))}
            fns[key] = fn
        except Exception as err:
            rows[key] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    for _ in range(rounds):
        for key, fn in fns.items():
            rows[key]["ms_rounds"].append(round(queued_ms(fn), 4))
    for r in rows.values():
        if r.get("ms_rounds"): r["ms"] = statistics.median(r["ms_rounds"])
    return {"shape": dict(TRAINING_SHAPE, dtype="bf16"), "rows": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="the interpreter check against the package kernel (CPU)")
    p.add_argument("--aot", action="store_true", help="registers and spills compiled for sm_90 (CPU)")
    p.add_argument("--rounds", type=int, default=3); p.add_argument("--out"); a = p.parse_args()
    if a.check and a.aot: p.error("--check and --aot: one at a time (the interpreter replaces the compiler)")
    from common import emit
    res = {}
    if a.check: res["interpreter_rel_diff"] = check()
    if a.aot: res["aot_sm90"] = aot()
    if not (a.check or a.aot):
        if not torch.cuda.is_available(): sys.exit("exp_bwd_chunk_nblocks: needs a CUDA GPU (or --check / --aot)")
        res.update(on_gpu(a.rounds))
    emit(res, "cuda" if torch.cuda.is_available() else None, a.out, rounds=a.rounds)


if __name__ == "__main__":
    main()
