"""How fast could chapter 05c's one-kernel backward (`bwd_chunk_kernel`) be? An experiment, not a kernel of the package.

`traffic_kernel` below has the real kernel's grid (one program per batch, chunk and head), reads exactly what it reads
(x, dy, both halves of q and k, both halves of the chunk's state S and of its gradient G, the decays, cos and sin) and
writes exactly what it writes (the four rotated gradients of B and C, dx, and the per-token decay and phase pieces), all
with the same strides, but replaces the fourteen 64x64x64 products by elementwise sums. Its time is what the memory
traffic alone costs at the occupancy its few registers allow: a floor for any restructuring of the real kernel that
keeps one program per chunk. Both kernels run on the same inputs at the 434M model's training shape (B=16, T=2048,
H=16, complex N=64 -> M=128, D=64, chunk 64, bf16), `--rounds` interleaved rounds of 20 queued calls each; the JSON
gives milliseconds, bytes moved and the resulting bandwidth, and the compiled registers and shared memory of both.

    python benchmarks/exp_bwd_chunk_floor.py --out benchmarks/results/bwd_chunk_floor_h200.json
"""
import argparse, statistics, sys

import torch
import triton
import triton.language as tl


@triton.jit
def traffic_kernel(q_ptr, k_ptr, x_ptr, dy_ptr, a_ptr, st_ptr, dst_ptr, cos_ptr, sin_ptr,
                   o1_ptr, o2_ptr, o3_ptr, o4_ptr, dx_ptr, da_ptr, kdk_ptr, gs_ptr, dth_ptr,
                   sqb, sqt, sqh, skb, skt, skh, sxb, sxt, sxh, sdb, sdt, sdh, sob, sot, soh, sgb, sgt, sgh,
                   T, H, NH, D, Q, NC, BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    "bwd_chunk_kernel's loads and stores (BQ = BN = BD here), elementwise arithmetic only."
    pid = tl.program_id(0)
    h, c, b = pid % H, (pid // H) % NC, pid // (H * NC)
    offs, offs_n, offs_d = tl.arange(0, BQ), tl.arange(0, BN), tl.arange(0, BD)
    t = c * Q + offs
    mt, mn, mdd = (offs < Q) & (t < T), offs_n < NH, offs_d < D
    mtn, mtd, mnd = mt[:, None] & mn[None, :], mt[:, None] & mdd[None, :], mn[:, None] & mdd[None, :]
    a = tl.load(a_ptr + (b * NC * Q + t) * H + h, mask=offs < Q, other=0.)
    xs = tl.load(x_ptr + b * sxb + t[:, None] * sxt + h * sxh + offs_d[None, :], mask=mtd, other=0.).to(tl.float32)
    dy = tl.load(dy_ptr + b * sdb + t[:, None] * sdt + h * sdh + offs_d[None, :], mask=mtd, other=0.).to(tl.float32)
    qo = q_ptr + b * sqb + t[:, None] * sqt + h * sqh + offs_n[None, :]
    ko = k_ptr + b * skb + t[:, None] * skt + h * skh + offs_n[None, :]
    q1, q2 = tl.load(qo, mask=mtn, other=0.).to(tl.float32), tl.load(qo + NH, mask=mtn, other=0.).to(tl.float32)
    k1, k2 = tl.load(ko, mask=mtn, other=0.).to(tl.float32), tl.load(ko + NH, mask=mtn, other=0.).to(tl.float32)
    so = ((b * NC + c) * H + h) * 2 * NH * D + offs_n[:, None] * D + offs_d[None, :]
    S1 = tl.load(st_ptr + so, mask=mnd, other=0.).to(tl.float32)
    S2 = tl.load(st_ptr + so + NH * D, mask=mnd, other=0.).to(tl.float32)
    G1 = tl.load(dst_ptr + so, mask=mnd, other=0.).to(tl.float32)
    G2 = tl.load(dst_ptr + so + NH * D, mask=mnd, other=0.).to(tl.float32)
    co = tl.load(cos_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    si = tl.load(sin_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
    tl.store(gs_ptr + (b * NC + c) * H + h, tl.sum(tl.sum(S1 * G1 + S2 * G2, axis=1), axis=0))
    oo = b * sob + t[:, None] * sot + h * soh + offs_n[None, :]
    ty = o1_ptr.dtype.element_ty
    tl.store(o1_ptr + oo, (co * q1 + S1 + xs).to(ty), mask=mtn)
    tl.store(o2_ptr + oo, (si * q2 + S2 + dy).to(ty), mask=mtn)
    tl.store(o3_ptr + oo, (co * k1 + G1).to(ty), mask=mtn)
    tl.store(o4_ptr + oo, (si * k2 + G2).to(ty), mask=mtn)
    tl.store(dx_ptr + b * sgb + t[:, None] * sgt + h * sgh + offs_d[None, :], (xs * dy).to(dx_ptr.dtype.element_ty), mask=mtd)
    part = (b * NC * Q + c * Q + offs) * H + h
    tl.store(da_ptr + part, tl.sum(q1 * k1, axis=1) + a, mask=offs < Q)
    tl.store(kdk_ptr + part, tl.sum(q2 * k2, axis=1), mask=offs < Q)
    tl.store(dth_ptr + part, tl.sum(xs * dy, axis=1), mask=offs < Q)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("exp_bwd_chunk_floor: needs a CUDA GPU")
    from common import TRAINING_SHAPE, emit, queued_ms, rotated_backward_inputs
    from bench_kernel_regs import Capped, compiled_info
    from mamba3_lite.ssd.triton import chunk_scan
    from mamba3_lite.ssd.triton.phases import strides3 as s3
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    Bsz, T, H, M, D, Q = TRAINING_SHAPE.values()
    NH, NC = M // 2, T // Q
    q, k, x, dy, alpha, states, dstates, cos, sin = rotated_backward_inputs()
    outs = [torch.empty(Bsz, T, H, NH, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    dx = torch.empty_like(x)
    da, kdk, dth = (torch.empty(Bsz, NC * Q, H, device="cuda") for _ in range(3))
    gs = torch.empty(Bsz, NC, H, device="cuda")
    launch = {}

    def traffic():
        launch["traffic"] = traffic_kernel[(Bsz * NC * H,)](
            q, k, x, dy, alpha, states, dstates, cos, sin, *outs, dx, da, kdk, gs, dth, *s3(q), *s3(k), *s3(x),
            *s3(dy), *s3(outs[0]), *s3(dx), T, H, NH, D, Q, NC, BQ=64, BN=64, BD=64, num_warps=TUNE["warps_chunk"])
    capped = Capped(chunk_scan.bwd_chunk_kernel)
    chunk_scan.bwd_chunk_kernel = capped                   # records the real kernel's compiled launch
    real = lambda: chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                                  num_warps=TUNE["warps_chunk"], num_stages=TUNE["stages_chunk"])
    times = {"bwd_chunk_kernel": [], "traffic_kernel": []}
    for _ in range(a.rounds):
        times["bwd_chunk_kernel"].append(queued_ms(real)); times["traffic_kernel"].append(queued_ms(traffic))
    nbytes = lambda *ts: sum(t.numel() * t.element_size() for t in ts)
    moved = nbytes(q, k, x, dy, alpha, states, dstates, cos, sin, *outs, dx, da, kdk, dth, gs)
    res = {"shape": dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16"), "bytes_moved": moved}
    for name, ts in times.items():
        ms = statistics.median(ts)
        res[name] = {"ms": round(ms, 4), "ms_rounds": [round(t, 4) for t in ts], "tb_per_s": round(moved / ms / 1e9, 2),
                     "compiled": compiled_info(capped.last if name == "bwd_chunk_kernel" else launch["traffic"])}
    emit(res, "cuda", a.out, rounds=a.rounds, note="traffic_kernel: bwd_chunk_kernel's grid, loads and stores with "
         "elementwise arithmetic only (an experiment: its outputs mean nothing); ms per call of 20 queued back to back")


if __name__ == "__main__":
    main()
