"""Could chapter 05c's one-kernel backward hide its loads behind its products? An experiment, not a kernel of the package.

`exp_bwd_chunk_floor.py` found the real kernel (`bwd_chunk_kernel`: one program per batch, chunk and head, 255
registers and 82 KB of shared memory, so two programs an SM) 0.16 ms a call slower than a kernel with its loads and
stores alone at the same occupancy: its products do not overlap its memory traffic. `persistent_kernel` below is the
same arithmetic (the training path: rotated outputs, dx written) with a grid of `programs` programs, each looping over
the (b, chunk, h) tiles `pid, pid + programs, ...` in a `tl.range` with `num_stages`: with 2 or more stages Triton's
software pipeliner issues the next tile's loads (asynchronous copies into shared memory) before this tile's products.
Each configuration's outputs are compared with the real kernel's (max |diff| / max |ref|) and timed against it in
`--rounds` interleaved rounds of 20 queued calls at the 434M model's training shape; a configuration that fails to
compile (e.g. too much shared memory) is reported with its error.

    python benchmarks/exp_bwd_chunk_persistent.py --out benchmarks/results/bwd_chunk_persistent_h200.json
"""
import argparse, statistics, sys

import torch
import triton
import triton.language as tl


@triton.jit
def persistent_kernel(q_ptr, k_ptr, x_ptr, dy_ptr, a_ptr, st_ptr, dst_ptr, cos_ptr, sin_ptr,
                      o1_ptr, o2_ptr, o3_ptr, o4_ptr, dx_ptr, da_ptr, kdk_ptr, gs_ptr, dth_ptr,
                      sqb, sqt, sqh, skb, skt, skh, sxb, sxt, sxh, sdb, sdt, sdh, sob, sot, soh, sgb, sgt, sgh,
                      T, H, NH, D, Q, NC, NT, STAGES: tl.constexpr,
                      BQ: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    "bwd_chunk_kernel (ROTATE, WITH_DX, fp32 accumulators) over tiles pid, pid + num_programs, ..."
    offs, offs_n, offs_d = tl.arange(0, BQ), tl.arange(0, BN), tl.arange(0, BD)
    for tile in tl.range(tl.program_id(0), NT, tl.num_programs(0), num_stages=STAGES):
        h, c, b = tile % H, (tile // H) % NC, tile // (H * NC)
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
        dA = (tl.dot(dy, tl.trans(xs)) * L).to(xs.dtype)
        qo = q_ptr + b * sqb + t[:, None] * sqt + h * sqh + offs_n[None, :]
        ko = k_ptr + b * skb + t[:, None] * skt + h * skh + offs_n[None, :]
        q1, q2 = tl.load(qo, mask=mtn, other=0.), tl.load(qo + NH, mask=mtn, other=0.)
        k1, k2 = tl.load(ko, mask=mtn, other=0.), tl.load(ko + NH, mask=mtn, other=0.)
        so = ((b * NC + c) * H + h) * 2 * NH * D + offs_n[:, None] * D + offs_d[None, :]
        S1 = tl.load(st_ptr + so, mask=mnd, other=0.).to(xs.dtype)
        S2 = tl.load(st_ptr + so + NH * D, mask=mnd, other=0.).to(xs.dtype)
        G1 = tl.load(dst_ptr + so, mask=mnd, other=0.).to(xs.dtype)
        G2 = tl.load(dst_ptr + so + NH * D, mask=mnd, other=0.).to(xs.dtype)
        gs = tl.sum(tl.sum(S1.to(w.dtype) * G1.to(w.dtype) + S2.to(w.dtype) * G2.to(w.dtype), axis=1), axis=0)
        tl.store(gs_ptr + (b * NC + c) * H + h, gs)
        ea = tl.exp(a)[:, None]
        dq1 = tl.dot(dA, k1) + tl.dot(dy, tl.trans(S1)) * ea
        dq2 = tl.dot(dA, k2) + tl.dot(dy, tl.trans(S2)) * ea
        q1f, q2f = q1.to(dq1.dtype), q2.to(dq1.dtype)
        da = tl.sum(q1f * dq1 + q2f * dq2, axis=1)
        dth = tl.sum(q1f * dq2 - q2f * dq1, axis=1)
        oo = b * sob + t[:, None] * sot + h * soh + offs_n[None, :]
        ty = o1_ptr.dtype.element_ty
        co = tl.load(cos_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
        si = tl.load(sin_ptr + (b * T + t) * H + h, mask=mt, other=0.)[:, None]
        tl.store(o1_ptr + oo, (co * dq1 + si * dq2).to(ty), mask=mtn)
        tl.store(o2_ptr + oo, (co * dq2 - si * dq1).to(ty), mask=mtn)
        P = ((tl.dot(q1, tl.trans(k1)) + tl.dot(q2, tl.trans(k2))) * L).to(dy.dtype)
        dx = tl.dot(tl.trans(P), dy) + (tl.dot(k1, G1) + tl.dot(k2, G2)) * w
        tl.store(dx_ptr + b * sgb + t[:, None] * sgt + h * sgh + offs_d[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mtd)
        dk1 = tl.dot(xs, tl.trans(G1)) * w
        dk2 = tl.dot(xs, tl.trans(G2)) * w
        k1f, k2f = k1.to(dk1.dtype), k2.to(dk1.dtype)
        kdk = tl.sum(k1f * dk1 + k2f * dk2, axis=1)
        dk1 += tl.dot(tl.trans(dA), q1)
        dk2 += tl.dot(tl.trans(dA), q2)
        da -= tl.sum(k1f * dk1 + k2f * dk2, axis=1)
        dth += tl.sum(k1f * dk2 - k2f * dk1, axis=1)
        tl.store(o3_ptr + oo, (co * dk1 + si * dk2).to(ty), mask=mtn)
        tl.store(o4_ptr + oo, (si * dk1 - co * dk2).to(ty), mask=mtn)
        part = (b * NC * Q + c * Q + offs) * H + h
        tl.store(da_ptr + part, da, mask=offs < Q)
        tl.store(kdk_ptr + part, kdk, mask=offs < Q)
        tl.store(dth_ptr + part, dth, mask=offs < Q)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("exp_bwd_chunk_persistent: needs a CUDA GPU")
    from common import TRAINING_SHAPE, emit, queued_ms, rel_diff, rotated_backward_inputs
    from bench_kernel_regs import compiled_info
    from mamba3_lite.ssd.triton import chunk_scan
    from mamba3_lite.ssd.triton.phases import strides3 as s3
    from mamba3_lite.ssd.triton.real_ssd import TUNE
    Bsz, T, H, M, D, Q = TRAINING_SHAPE.values()
    NH, NC = M // 2, T // Q
    q, k, x, dy, alpha, states, dstates, cos, sin = rotated_backward_inputs()
    real = lambda: chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                                  num_warps=TUNE["warps_chunk"], num_stages=TUNE["stages_chunk"])
    ref_bc, ref_dx, _, ref_dth = real()
    ref = [*ref_bc, ref_dx, ref_dth]
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def persistent(programs, stages, warps):
        outs = [torch.empty(Bsz, T, H, NH, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
        dx = torch.empty_like(x)
        da, kdk, dth = (torch.empty(Bsz, NC * Q, H, device="cuda") for _ in range(3))
        gs = torch.empty(Bsz, NC, H, device="cuda")
        o1, o2, o3, o4 = outs[2], outs[3], outs[0], outs[1]         # o1..o4 = dC_re, dC_im, dB_re, dB_im
        info = {}
        def run():
            info["k"] = persistent_kernel[(programs,)](
                q, k, x, dy, alpha, states, dstates, cos, sin, o1, o2, o3, o4, dx, da, kdk, gs, dth,
                *s3(q), *s3(k), *s3(x), *s3(dy), *s3(o1), *s3(dx), T, H, NH, D, Q, NC, Bsz * NC * H, STAGES=stages,
                BQ=64, BN=64, BD=64, num_warps=warps)
            return [*outs, dx, dth]
        return run, info

    configs = {"real bwd_chunk_kernel": (real, None)}
    rows = {"real bwd_chunk_kernel": {"ms_rounds": []}}
    for programs in (sms, 2 * sms, 3 * sms):
        for stages in (1, 2, 3):
            name = f"persistent programs={programs} stages={stages} warps=4"
            fn, info = persistent(programs, stages, 4)
            try:
                out = fn(); torch.cuda.synchronize()
                rows[name] = {"ms_rounds": [], "rel_diff": max(rel_diff(o, r) for o, r in zip(out, ref)),
                              "compiled": compiled_info(info["k"])}
                configs[name] = (fn, info)
            except Exception as err:                             # e.g. out of shared memory
                rows[name] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    for _ in range(a.rounds):
        for name, (fn, _) in configs.items():
            rows[name]["ms_rounds"].append(round(queued_ms(fn), 4))
    for r in rows.values():
        if r.get("ms_rounds"): r["ms"] = statistics.median(r["ms_rounds"])
    emit({"shape": dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16"), "sms": sms, "rows": rows}, "cuda", a.out,
         rounds=a.rounds, note="ms per call of 20 queued back to back; rel_diff against the real kernel's outputs")


if __name__ == "__main__":
    main()
