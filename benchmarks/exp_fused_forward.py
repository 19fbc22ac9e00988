"""The forward state pass and the forward output in one sequential kernel? An experiment, not a kernel of the package.

The package's forward runs chapter 05b's state pass (`states_forward`: per (b, h, tile of the state), a walk over the
chunks that stores the state entering each one) and then chapter 05c's output (`scan_y`: one program per chunk, which
reads that stored state back with the chunk's q, k and x). `fused_fwd_kernel` below walks the chunks of one (b, h, D
tile) once and does both: the state stays in registers (fp32), each chunk's output is computed from it and the chunk's
q, k, x as soon as they are loaded, then the state moves on. The entering states are still stored (the backward reads
them), but q, k and x are read once instead of k and x twice, and the states are not read back: at the training shape
~268 MB a layer less traffic out of ~740 MB. The price is parallelism: B·H·(D / BD) programs, each walking every chunk
(256 or 512 at B=16, H=16; a quarter of that at B=4). Its arithmetic is the two kernels' in their order (the stored
state cast to the operands' dtype for the output's dot, as `scan_y` reads it), so the result should equal theirs.

`fused_rot_fwd_kernel` also does chapter 05a's rotation (`rotate_forward`, its own launch today) as it loads B and C,
and stores q and k for the backward from the program of the first D tile: the rotation's re-read of q and k (~268 MB
a layer) goes too. (Two earlier tries at moving the rotation were not faster: into the state pass alone, and into every
kernel that loads q and k, the backward's included; chapter 05b/05d.) Compiled here for sm_90 (`--resources`, triton
3.9) it spills at every launch tried (56 to 768 bytes of stack), where `fused_fwd_kernel` fits 64-wide D tiles in 8
warps (254 registers) and 32-wide ones in ~230 at 4 warps.

On the GPU: the package's pair (05d's TUNE: the wide state tiles where they apply, scan_y's Hopper launch; with the
rotation, 05a's `rotate_forward` before them) against each fused kernel at each D tile, warp count and stage count,
timed queued (`common.sweep_launches`), with each result's difference from the pair's. On a CPU (`--check`): parity with the pair on Triton's interpreter in fp32 at two D tiles,
an uneven T with an initial state; prints the largest differences (2026-12-03: 0.0 for y and both states; with the
rotation inside, q, k and the states equal, y within 7.6e-6 of 52). Not bf16: Triton 3.9's interpreter here returns
garbage for bf16 `tl.dot` (a 16x16 product off by 2e10), the package's own kernels included.

    python benchmarks/exp_fused_forward.py --out benchmarks/results/fused_forward_h200.json
    python benchmarks/exp_fused_forward.py --batch 4 --seq 8192 --out benchmarks/results/fused_forward_8192_h200.json
    python benchmarks/exp_fused_forward.py --check
    python benchmarks/exp_fused_forward.py --resources --out benchmarks/results/fused_forward_resources_aot_sm90.json
"""
import itertools, os, sys

if "--check" in sys.argv and not os.environ.get("TRITON_INTERPRET"):
    os.environ["TRITON_INTERPRET"] = "1"               # before triton is imported: the interpreter, for the CPU check

import torch
import triton
import triton.language as tl

from common import emit, scan_backward_inputs, sweep_cli, sweep_launches
from mamba3_lite.ssd.triton.phases import (block_size, device_capability, dot, dot_precision, one_layout, rotate_forward,
                                           strides3)
from mamba3_lite.ssd.triton.chunk_state import chunk_decays, entering_state, state_dtype, states_forward
from mamba3_lite.ssd.triton.chunk_scan import scan_y
from mamba3_lite.ssd.triton.real_ssd import batch_head_pairs, scan_y_blocks, state_blocks, tune_for


@triton.jit(do_not_specialize=["T", "NC"])
def fused_fwd_kernel(q_ptr, k_ptr, x_ptr, a_ptr, s0_ptr, st_ptr, sf_ptr, y_ptr,
                     sqb, sqt, sqh, skb, skt, skh, sxb, sxt, sxh, syb, syt, syh, T, H, M, D, Q, NC,
                     HAS_S0: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                     BQ: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    """Sequential over chunks for one (b, h, D tile), the whole M: store the entering state S, then
    y_l = e^{a_l} q_l S + sum_{s<=l} e^{a_l - a_s} (q_l . k_s) x_s and S <- e^{a_end} S + sum_s w_s k_s x_s^T."""
    pid_d, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    offs_m, offs_s = tl.arange(0, BM), tl.arange(0, BQ)
    offs_d = pid_d * BD + tl.arange(0, BD)
    mm, mdd = offs_m < M, offs_d < D
    mmd = mm[:, None] & mdd[None, :]
    md = offs_m[:, None] * D + offs_d[None, :]
    S = entering_state(s0_ptr, sf_ptr, pid_bh, M, D, md, mmd, HAS_S0, BM, BD)       # fp32 (fp64 for fp64)
    for c in range(NC):
        stored = S.to(st_ptr.dtype.element_ty)
        tl.store(st_ptr + ((b * NC + c) * H + h) * M * D + md, stored, mask=mmd)
        a_end, t_s, ms, w = chunk_decays(a_ptr, a_ptr, b, c, h, T, H, Q, NC, offs_s, False)   # alpha alone (no 05a pair)
        a_s = tl.load(a_ptr + (b * NC * Q + t_s) * H + h, mask=offs_s < Q, other=0.)
        qv = tl.load(q_ptr + b * sqb + t_s[:, None] * sqt + h * sqh + offs_m[None, :],
                     mask=ms[:, None] & mm[None, :], other=0.)                            # (BQ, BM)
        kT = tl.load(k_ptr + b * skb + t_s[None, :] * skt + h * skh + offs_m[:, None],
                     mask=mm[:, None] & ms[None, :], other=0.)                            # (BM, BQ)
        xs = tl.load(x_ptr + b * sxb + t_s[:, None] * sxt + h * sxh + offs_d[None, :],
                     mask=ms[:, None] & mdd[None, :], other=0.)                           # (BQ, BD)
        acc = dot(qv, stored.to(qv.dtype), F64, PREC) * tl.exp(a_s)[:, None]          # as scan_y reads the state
        causal = (offs_s[:, None] >= offs_s[None, :]) & ms[None, :]
        L = tl.exp(tl.where(causal, a_s[:, None] - a_s[None, :], float("-inf")))      # masked before exp
        acc += dot((dot(qv, kT, F64, PREC) * L).to(xs.dtype), xs, F64, PREC)
        tl.store(y_ptr + b * syb + t_s[:, None] * syt + h * syh + offs_d[None, :],
                 acc.to(y_ptr.dtype.element_ty), mask=ms[:, None] & mdd[None, :])
        S = S * tl.exp(a_end) + dot((kT * w[None, :]).to(xs.dtype), xs, F64, PREC)
    tl.store(sf_ptr + pid_bh * M * D + md, S, mask=mmd)


@triton.jit(do_not_specialize=["T", "NC"])
def fused_rot_fwd_kernel(br_ptr, bi_ptr, cr_ptr, ci_ptr, cos_ptr, sin_ptr, x_ptr, a_ptr, s0_ptr,
                         q_ptr, k_ptr, st_ptr, sf_ptr, y_ptr, sbb, sbt, sbh, sxb, sxt, sxh, syb, syt, syh, T, H, N, D, Q, NC,
                         HAS_S0: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                         BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    """`fused_fwd_kernel` that also does 05a's rotation as it loads B and C: q = [cos Cr - sin Ci, sin Cr + cos Ci],
    k = [cos Br + sin Bi, sin Br - cos Bi], rounded to x's dtype as `rotate_forward` stores them; the program of the
    first D tile stores q and k (the backward reads them). Rows of the state: n and N + n for the two halves."""
    pid_d, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    M = 2 * N
    r, offs_n, offs_s = tl.arange(0, 2 * BN), tl.arange(0, BN), tl.arange(0, BQ)
    offs_m = tl.where(r < BN, r, N + r - BN)                                            # block row -> row of M
    mm = (r % BN) < N
    offs_d = pid_d * BD + tl.arange(0, BD)
    mdd = offs_d < D
    mmd = mm[:, None] & mdd[None, :]
    md = offs_m[:, None] * D + offs_d[None, :]
    S = entering_state(s0_ptr, sf_ptr, pid_bh, M, D, md, mmd, HAS_S0, 2 * BN, BD)
    ty = x_ptr.dtype.element_ty
    for c in range(NC):
        stored = S.to(st_ptr.dtype.element_ty)
        tl.store(st_ptr + ((b * NC + c) * H + h) * M * D + md, stored, mask=mmd)
        a_end, t_s, ms, w = chunk_decays(a_ptr, a_ptr, b, c, h, T, H, Q, NC, offs_s, False)   # alpha alone (no 05a pair)
        a_s = tl.load(a_ptr + (b * NC * Q + t_s) * H + h, mask=offs_s < Q, other=0.)
        msn = ms[:, None] & (offs_n < N)[None, :]
        bc = b * sbb + t_s[:, None] * sbt + h * sbh + offs_n[None, :]
        co = tl.load(cos_ptr + (b * T + t_s) * H + h, mask=ms, other=0.)[:, None]
        si = tl.load(sin_ptr + (b * T + t_s) * H + h, mask=ms, other=0.)[:, None]
        cr, ci = tl.load(cr_ptr + bc, mask=msn, other=0.).to(tl.float32), tl.load(ci_ptr + bc, mask=msn, other=0.).to(tl.float32)
        q1, q2 = (co * cr - si * ci).to(ty), (si * cr + co * ci).to(ty)                # (BQ, BN) each
        br, bi = tl.load(br_ptr + bc, mask=msn, other=0.).to(tl.float32), tl.load(bi_ptr + bc, mask=msn, other=0.).to(tl.float32)
        k1, k2 = (co * br + si * bi).to(ty), (si * br - co * bi).to(ty)
        if pid_d == 0:
            qk = (b * T + t_s[:, None]) * H * M + h * M + offs_n[None, :]             # q, k (B,T,H,2N) contiguous
            tl.store(q_ptr + qk, q1, mask=msn); tl.store(q_ptr + qk + N, q2, mask=msn)
            tl.store(k_ptr + qk, k1, mask=msn); tl.store(k_ptr + qk + N, k2, mask=msn)
        qv = tl.reshape(tl.permute(tl.join(q1, q2), (0, 2, 1)), (BQ, 2 * BN))           # [q1 | q2]: (BQ, 2BN)
        kT = tl.trans(tl.reshape(tl.permute(tl.join(k1, k2), (0, 2, 1)), (BQ, 2 * BN)))  # (2BN, BQ)
        xs = tl.load(x_ptr + b * sxb + t_s[:, None] * sxt + h * sxh + offs_d[None, :],
                     mask=ms[:, None] & mdd[None, :], other=0.)                           # (BQ, BD)
        acc = dot(qv, stored.to(qv.dtype), F64, PREC) * tl.exp(a_s)[:, None]
        causal = (offs_s[:, None] >= offs_s[None, :]) & ms[None, :]
        L = tl.exp(tl.where(causal, a_s[:, None] - a_s[None, :], float("-inf")))
        acc += dot((dot(qv, kT, F64, PREC) * L).to(xs.dtype), xs, F64, PREC)
        tl.store(y_ptr + b * syb + t_s[:, None] * syt + h * syh + offs_d[None, :],
                 acc.to(y_ptr.dtype.element_ty), mask=ms[:, None] & mdd[None, :])
        S = S * tl.exp(a_end) + dot((kT * w[None, :]).to(xs.dtype), xs, F64, PREC)
    tl.store(sf_ptr + pid_bh * M * D + md, S, mask=mmd)


def fused_rotate_forward(B_re, B_im, C_re, C_im, cos, sin, x, alpha, S0, Q, BD=64, num_warps=4, num_stages=2):
    """`rotate_forward` and `fused_forward` in one kernel: B, C (B,T,H,N) sharing one layout, cos, sin (B,T,H) fp32, the
    rest as `fused_forward` takes them. Returns y, the final state, the entering states, q and k (B,T,H,2N) in x's dtype."""
    Bsz, T, H, N = B_re.shape
    D, NC, acc = x.shape[-1], alpha.shape[1] // Q, alpha.dtype
    BD = min(BD, block_size(D))
    q = torch.empty(Bsz, T, H, 2 * N, dtype=x.dtype, device=x.device)
    k = torch.empty_like(q)
    states = torch.empty(Bsz, NC, H, 2 * N, D, dtype=state_dtype(x.dtype, acc), device=x.device)
    S_fin = torch.empty(Bsz, H, 2 * N, D, dtype=acc, device=x.device)
    y = torch.empty(Bsz, T, H, D, dtype=x.dtype, device=x.device)
    bc = one_layout(B_re, B_im, C_re, C_im)
    fused_rot_fwd_kernel[(triton.cdiv(D, BD), Bsz * H)](
        *bc, cos, sin, x, alpha, S0 if S0 is not None else S_fin, q, k, states, S_fin, y, *strides3(bc[0]), *strides3(x), *strides3(y), T, H, N, D, Q, NC, HAS_S0=S0 is not None, F64=acc == torch.float64,
        PREC=dot_precision(x.dtype), BQ=block_size(Q), BN=block_size(N), BD=BD, num_warps=num_warps, num_stages=num_stages)
    return y, S_fin, states, q, k


def fused_forward(q, k, x, alpha, S0, Q, BD=64, num_warps=4, num_stages=2):
    """`scan_forward`'s inputs and results (y, final state), and the states entering each chunk, from one kernel:
    q, k (B,T,H,M), x (B,T,H,D) in one dtype, alpha (B, NC*Q, H) chunk-local in fp32, S0 (B,H,M,D) or None."""
    Bsz, T, H, M = q.shape
    D, NC, acc = x.shape[-1], alpha.shape[1] // Q, alpha.dtype
    BD = min(BD, block_size(D))
    states = torch.empty(Bsz, NC, H, M, D, dtype=state_dtype(k.dtype, acc), device=k.device)
    S_fin = torch.empty(Bsz, H, M, D, dtype=acc, device=k.device)
    y = torch.empty(Bsz, T, H, D, dtype=x.dtype, device=x.device)
    fused_fwd_kernel[(triton.cdiv(D, BD), Bsz * H)](
        q, k, x, alpha, S0 if S0 is not None else S_fin, states, S_fin, y, *strides3(q), *strides3(k), *strides3(x),
        *strides3(y), T, H, M, D, Q, NC, HAS_S0=S0 is not None, F64=acc == torch.float64, PREC=dot_precision(q.dtype),
        BQ=block_size(Q), BM=block_size(M), BD=BD, num_warps=num_warps, num_stages=num_stages)
    return y, S_fin, states


def package_forward(q, k, x, alpha, S0, Q):
    "The package's two launches as 05d runs them on this device: y, the final state, the entering states."
    tune = tune_for(device_capability(q))
    states, S_fin = states_forward(k, x, alpha, S0, Q, **state_blocks(tune, batch_head_pairs(k)))
    return scan_y(q, k, x, alpha, states, Q, **scan_y_blocks(tune)), S_fin, states


def package_rotate_forward(B_re, B_im, C_re, C_im, cos, sin, x, alpha, S0, Q):
    "05a's rotation, then the package's two launches: y, the final state, the entering states, q, k."
    q, k = rotate_forward(B_re, B_im, C_re, C_im, cos, sin, x.dtype, block_rows=tune_for(device_capability(x))["BR_rot"])
    return (*package_forward(q, k, x, alpha, S0, Q), q, k)


def report(label: str, got, ref, names=("y", "final state", "states", "q", "k")):
    "Print the largest |fused - package| of each output and fail past 1e-4."
    diffs = {n: (a - b).abs().max().item() for n, a, b in zip(names, got, ref)}
    print(f"interpreter, fp32, {label}: max |fused - package| {diffs}")
    assert all(v < 1e-4 for v in diffs.values()), diffs


def check_on_interpreter():
    """Parity with the package's launches in fp32 (see the docstring on bf16): uneven T, an initial state, M and D that
    fill no block, two D tiles, without and with the rotation."""
    g = torch.Generator().manual_seed(0)
    Bsz, T, H, M, D, Q = 2, 45, 2, 24, 20, 16
    q, k = (torch.randn(Bsz, T, H, M, generator=g) for _ in range(2))
    x = torch.randn(Bsz, T, H, D, generator=g)
    nc = -(-T // Q)
    alpha = (-0.4 * torch.rand(Bsz, nc, Q, H, generator=g)).cumsum(2).view(Bsz, nc * Q, H)
    S0 = torch.randn(Bsz, H, M, D, generator=g)
    N = M // 2                                            # with the rotation: B, C strided slices of one projection
    bc = list(torch.randn(Bsz, T, H, 4 * N, generator=g).split(N, dim=-1))
    theta = torch.randn(Bsz, T, H, generator=g).cumsum(1)
    rot = (*bc, theta.cos(), theta.sin(), x, alpha, S0, Q)
    for BD in (16, 32):
        report(f"BD={BD}", fused_forward(q, k, x, alpha, S0, Q, BD=BD), package_forward(q, k, x, alpha, S0, Q))
        report(f"with the rotation, BD={BD}", fused_rotate_forward(*rot, BD=BD), package_rotate_forward(*rot))


def compiled_resources(out=None):
    """Registers, spills and shared memory of the fused kernel as sm_90 would run it at the training shape (bf16, fp32
    decays and states, M=128, chunk 64), beside the package's two kernels at their Hopper launches; no GPU needed."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from aot_kernel_resources import resources
    from mamba3_lite.ssd.triton import chunk_scan, chunk_state
    base = dict(F64=False, PREC="tf32", BQ=64, BM=128)
    rows = [{"kernel": "fused_fwd_kernel", "BD": bd, "warps": w, "stages": st,
             **resources(fused_fwd_kernel, 90, w, st, dict(base, HAS_S0=False, BD=bd), {"a_ptr", "s0_ptr", "sf_ptr"})}
            for bd, w, st in itertools.product((32, 64), (4, 8), (1, 2, 3))]
    rows += [{"kernel": "fused_rot_fwd_kernel", "BD": bd, "warps": w, "stages": st,
              **resources(fused_rot_fwd_kernel, 90, w, st, dict(F64=False, PREC="tf32", BQ=64, HAS_S0=False, BN=64, BD=bd),
                          {"a_ptr", "s0_ptr", "sf_ptr", "cos_ptr", "sin_ptr"})}
             for bd, w, st in itertools.product((32, 64), (4, 8), (1, 2))]
    rows.append({"kernel": "state_fwd_kernel", "BM": 64, "BD": 64, "warps": 4, "stages": 2,
                 **resources(chunk_state.state_fwd_kernel, 90, 4, 2, dict(base, HAS_S0=False, HAS_LO=False, BM=64, BD=64),
                             {"a_ptr", "s0_ptr", "sf_ptr"})})
    rows.append({"kernel": "scan_fwd_kernel", "BC": 64, "BD": 64, "warps": 4, "stages": 1,
                 **resources(chunk_scan.scan_fwd_kernel, 90, 4, 1, dict(F64=False, PREC="tf32", BC=64, BM=128, BD=64,
                                                                           HAS_LO=False), {"a_ptr", "al_ptr"})})
    emit(rows, None, out, note="compiled here for sm_90 (no GPU); scan_fwd_kernel without the maxnreg=168 the package "
         "adds on Hopper; register counts depend on the Triton version (this machine's: see machine.triton)")


def main():
    if "--check" in sys.argv:
        check_on_interpreter(); return
    if "--resources" in sys.argv:
        compiled_resources(sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None); return
    a, s = sweep_cli(__doc__, "exp_fused_forward")
    q, k, x, _, alpha, _, _, g = scan_backward_inputs(*s.values())
    Q, N = s["Q"], s["M"] // 2
    bc = list(torch.randn(a.batch, a.seq, s["H"], 4 * N, device="cuda", generator=g).bfloat16().split(N, dim=-1))
    theta = torch.rand(a.batch, a.seq, s["H"], device="cuda", generator=g) * 6.28
    rot = (*bc, theta.cos(), theta.sin(), x, alpha, None, Q)

    def forward(path="package", **kw):
        return package_forward(q, k, x, alpha, None, Q) if path == "package" else fused_forward(q, k, x, alpha, None, Q, **kw)

    def rotated(path="package", **kw):
        return package_rotate_forward(*rot) if path == "package" else fused_rotate_forward(*rot, **kw)

    grid = [dict(path="fused", BD=bd, num_warps=w, num_stages=st) for bd, w, st in itertools.product((32, 64), (4, 8), (1, 2, 3))]
    package = dict(path="package")
    emit({"shape": {**s, "dtype": "bf16"}, **sweep_launches({"forward": (forward, package, grid),
                                                              "forward with the rotation": (rotated, package, grid)}, a.rounds)},
         device="cuda", out=a.out, benchmark="fused_forward")


if __name__ == "__main__":
    main()
