"""Why was chapter 05b's reverse state pass slower than its forward one at the same tiles? An experiment, not a kernel
of the package.

The two walks do the same work a chunk: one (BM, Q) x (Q, BD) product into a running state, a store of that state,
64 decays. Their compiled bodies (TTGIR) differed in one load: the forward's chunk-end decay alpha_end feeds the
product (through w = e^{alpha_end - alpha_s}), so Triton's software pipeline prefetches it; the reverse pass's scaled
only the running state and was a plain load on every step. The reverse pass took 0.144 ms a call against the
forward's 0.097 at T=8192 with the same 64 x 64 tiles, 8 warps, 4 stages (`state_tiles_8192_h200.json`). Timed here,
at the package's reverse-pass tiles for the shape and at BM 32 or 64 (BD 64), 4 or 8 warps, 2-4 stages:

- `package`: 05b's `state_bwd_kernel` as it is: alpha_end added into the product's decays as an exact zero
  (min(max(alpha_end, -3e38), 0) x 0), so that the pipeline sees it feed the product and prefetches it;
- `plain_load`: the same walk with alpha_end a plain load, the package's kernel before 2026-12-04; the same numbers
  (checked against `package`, bit for bit);
- `a_end_from_vector` (package tiles only): alpha_end read out of the chunk's already-loaded decays (the element at
  Q-1, by a masked sum), no load of its own; the same numbers;
- `ascending` (package tiles only): that last walk over the chunks in ascending order, a timing probe (wrong numbers:
  not compared);
- `forward`: 05b's `state_fwd_kernel` on the same tensors (q for k, dy for x), the walk it is compared with.

The recorded runs (`state_bwd_order_{8192,2048}_h200.json`, 2026-12-04) predate the change: their `package` rows are
`plain_load` here, their `a_end_in_product` rows `package`. GPU time per call queued 20 at a time
(`common.queued_ms`), the median of `--rounds`. Prints one JSON record.

    python benchmarks/exp_state_bwd_order.py --batch 4 --seq 8192 --out benchmarks/results/state_bwd_order_8192_h200.json
"""
import statistics

import torch
import triton
import triton.language as tl

from common import emit, queued_ms, rel_diff, scan_backward_inputs, sweep_cli
from mamba3_lite.ssd.triton.phases import block_size, dot, dot_precision, strides3
from mamba3_lite.ssd.triton.chunk_state import state_bwd_kernel, state_fwd_kernel


@triton.jit(do_not_specialize=["T", "NC"])
def reverse_probe_kernel(q_ptr, dy_ptr, a_ptr, dst_ptr, ds0_ptr, sqb, sqt, sqh, sdb, sdt, sdh, T, H, M, D, Q, NC,
                         ASCENDING: tl.constexpr, FROM_VECTOR: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                         BQ: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    """05b's reverse pass without dS_fin and with alpha_end a plain load (the kernel before 2026-12-04); FROM_VECTOR:
    alpha_end taken from the loaded decays instead; ASCENDING walks the chunks 0, 1, ..."""
    pid_m, pid_d, pid_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = pid_bh // H, pid_bh % H
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_d = pid_d * BD + tl.arange(0, BD)
    offs_s = tl.arange(0, BQ)
    mmd = (offs_m < M)[:, None] & (offs_d < D)[None, :]
    md = offs_m[:, None] * D + offs_d[None, :]
    G = tl.zeros([BM, BD], dtype=ds0_ptr.dtype.element_ty)
    for i in range(NC):
        c = i if ASCENDING else NC - 1 - i
        tl.store(dst_ptr + ((b * NC + c) * H + h) * M * D + md, G.to(dst_ptr.dtype.element_ty), mask=mmd)
        t_s = c * Q + offs_s
        ms = (offs_s < Q) & (t_s < T)
        a_s = tl.load(a_ptr + (b * NC * Q + t_s) * H + h, mask=offs_s < Q, other=0.)
        if FROM_VECTOR:
            a_end = tl.sum(tl.where(offs_s == Q - 1, a_s, 0.), axis=0)              # the chunk's last decay, loaded above
        else:
            a_end = tl.load(a_ptr + (b * NC * Q + c * Q + Q - 1) * H + h)
        e = tl.exp(tl.where(ms, a_s, float("-inf")))
        qT = tl.load(q_ptr + b * sqb + t_s[None, :] * sqt + h * sqh + offs_m[:, None],
                     mask=(offs_m < M)[:, None] & ms[None, :], other=0.)              # (BM, BQ)
        dys = tl.load(dy_ptr + b * sdb + t_s[:, None] * sdt + h * sdh + offs_d[None, :],
                      mask=ms[:, None] & (offs_d < D)[None, :], other=0.)             # (BQ, BD)
        G = G * tl.exp(a_end) + dot((qT * e[None, :]).to(dys.dtype), dys, F64, PREC)
    tl.store(ds0_ptr + pid_bh * M * D + md, G, mask=mmd)


def main():
    a, s = sweep_cli(__doc__, "exp_state_bwd_order")
    from mamba3_lite.ssd.triton.real_ssd import batch_head_pairs, state_blocks, tune_for
    from mamba3_lite.ssd.triton.phases import device_capability
    q, k, x, dy, alpha, states, dstates, _ = scan_backward_inputs(*s.values())
    Bsz, T, H, M = q.shape
    D, Q = dy.shape[-1], s["Q"]
    NC = alpha.shape[1] // Q
    prec = dot_precision(q.dtype)
    tune = tune_for(device_capability(q))

    def out():
        return torch.empty_like(dstates), torch.empty(Bsz, H, M, D, dtype=alpha.dtype, device=q.device)

    def launch(form, BM, BD, num_warps, num_stages):
        g, ds0 = out()
        grid = (triton.cdiv(M, BM), triton.cdiv(D, BD), Bsz * H)
        common = dict(F64=False, PREC=prec, BQ=block_size(Q), BM=BM, BD=BD, num_warps=num_warps, num_stages=num_stages)
        if form == "package":
            state_bwd_kernel[grid](q, dy, alpha, ds0, g, ds0, *strides3(q), *strides3(dy), T, H, M, D, Q, NC,
                                   HAS_DSF=False, **common)
        elif form == "forward":
            state_fwd_kernel[grid](q, dy, alpha, alpha, ds0, g, ds0, *strides3(q), *strides3(dy), T, H, M, D, Q, NC,
                                   HAS_S0=False, HAS_LO=False, **common)
        else:
            reverse_probe_kernel[grid](q, dy, alpha, g, ds0, *strides3(q), *strides3(dy), T, H, M, D, Q, NC,
                                       ASCENDING=form == "ascending", FROM_VECTOR=form in ("a_end_from_vector", "ascending"),
                                       **common)
        return g, ds0

    tiles = {"package": state_blocks(tune, batch_head_pairs(q), backward=True),
             **{f"{bm}x64, {w} warps, {st} stages": dict(BM=bm, BD=64, num_warps=w, num_stages=st)
                for bm in (32, 64) for w in (4, 8) for st in (2, 3, 4)}}
    rows = []
    for tile_name, kw in tiles.items():
        ref = launch("package", **kw)
        for form in ("package", "plain_load", "forward") + (("a_end_from_vector", "ascending") if tile_name == "package" else ()):
            fn = lambda: launch(form, **kw)
            got = fn()
            diff = max(rel_diff(o, r) for o, r in zip(got, ref)) if form in ("plain_load", "a_end_from_vector") else None
            ms = statistics.median(queued_ms(fn) for _ in range(a.rounds))
            rows.append({"tiles": tile_name, **kw, "form": form, "ms": round(ms, 4), "rel_diff_vs_package": diff})
            print(rows[-1], flush=True)
    emit({"shape": {**s, "dtype": "bf16"}, "rows": rows}, device="cuda", out=a.out, benchmark="state_bwd_order")


if __name__ == "__main__":
    main()
