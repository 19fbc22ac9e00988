"""Chapter 05c's one-kernel backward two ways, at the 434M model's scan sizes (H=16, complex N=64 -> M=128, D=64,
chunk 64, bf16, with the rotation) and several (B, T): after 05b's reverse state pass, one program per (b, chunk, h)
reading the G of its chunk (`scan_backward_chunk(..., dstates)`, today's path), against one program per (b, h) walking
its chunks last to first and carrying G itself (`scan_backward_chunk(..., None)`, CARRY: no reverse pass, no G per
chunk written or read). GPU time of `--rounds` interleaved rounds of 20 queued calls (median), the carried walk at
several warps/stages, the compiled registers, and every output of the carried walk against the two-step path's
(max |diff| / max |ref|). Prints one JSON record; on a CPU it refuses.

    python benchmarks/bench_bwd_carry.py --out benchmarks/results/bwd_carry_h200.json
"""
import argparse, statistics, sys

import torch

SHAPES = ((16, 2048), (8, 2048), (4, 2048), (32, 2048), (8, 4096), (4, 8192))     # (B, T); B*H programs carry


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_bwd_carry: needs a CUDA GPU")
    from common import emit, queued_ms, rel_diff, scan_backward_inputs
    from bench_kernel_regs import Capped, compiled_info
    from mamba3_lite.ssd.triton import chunk_scan
    from mamba3_lite.ssd.triton.chunk_state import states_backward
    from mamba3_lite.ssd.triton.real_ssd import TUNE, state_blocks
    capped = Capped(chunk_scan.bwd_chunk_kernel)
    chunk_scan.bwd_chunk_kernel = capped                   # records each compiled launch
    H, M, D, Q = 16, 128, 64, 64
    rows = []
    for Bsz, T in SHAPES:
        q, k, x, dy, alpha, states, _, g = scan_backward_inputs(Bsz, T, H, M, D, Q)
        theta = torch.rand(Bsz, T, H, device="cuda", generator=g) * 6.28
        cos, sin = theta.cos(), theta.sin()
        state_pass = lambda: states_backward(q, dy, alpha, None, Q, states.dtype, **state_blocks(TUNE))[0]
        dstates = state_pass()

        def two_step():
            return chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, state_pass(), Q, cos, sin, torch.bfloat16,
                                                  num_warps=TUNE["warps_chunk"], num_stages=TUNE["stages_chunk"])
        def carried(w, s):
            return lambda: chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, None, Q, cos, sin, torch.bfloat16,
                                                          num_warps=w, num_stages=s)
        flat = lambda r: [*r[0], r[1], r[2], r[3]]
        ref = flat(two_step())
        per_chunk = lambda: chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                                           num_warps=TUNE["warps_chunk"], num_stages=TUNE["stages_chunk"])
        paths = {"reverse state pass alone": state_pass, "per chunk alone (G given)": per_chunk,
                 "state pass + per chunk (today)": two_step}
        info = {}
        per_chunk(); info["per chunk alone (G given)"] = compiled_info(capped.last)
        for w in (4, 8):
            for s in (1, 2):
                name = f"carried, {w} warps, {s} stage(s)"
                try:
                    out = carried(w, s)(); info[name] = compiled_info(capped.last)
                    info[name]["rel_diff"] = dict(zip("dB_re dB_im dC_re dC_im dx dalpha dtheta".split(),
                                                      (round(rel_diff(o, r), 7) for o, r in zip(flat(out), ref))))
                    paths[name] = carried(w, s)
                except Exception as e:                     # e.g. out of shared memory at 2 stages
                    info[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        times = {n: [] for n in paths}
        for _ in range(a.rounds):
            for n, f in paths.items(): times[n].append(queued_ms(f))
        rows.append({"B": Bsz, "T": T, "B*H programs carried": Bsz * H,
                     "paths": [{"path": n, "ms": round(statistics.median(ts), 4), "ms_rounds": [round(t, 4) for t in ts],
                                **info.get(n, {})} for n, ts in times.items()]
                     + [{"path": n, **v} for n, v in info.items() if n not in times]})
        del q, k, x, dy, alpha, states, dstates, cos, sin
        torch.cuda.empty_cache()
    emit({"H": H, "M": M, "D": D, "Q": Q, "dtype": "bf16", "rows": rows}, "cuda", a.out, rounds=a.rounds,
         note="ms per call of 20 queued back to back; rel_diff: the carried walk's outputs against the two-step path's")


if __name__ == "__main__":
    main()
