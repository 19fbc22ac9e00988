"""What chapter 05a's hi + lo pair costs in the scan's kernels. Since 2026-12-05 the phase kernel sums the chunk-local log-decay in fp64 and
hands the scan kernels two fp32 numbers, each difference alpha_i - alpha_j taken pairwise (exact after reset-like
steps); before, one fp32 alpha. This times the scan's kernels both ways on the same inputs — `alpha_lo=None` compiles
the kernels without the pair (`HAS_LO` off), the code they had before — through the launchers a training step calls:
05b's state pass with 05c's output (`scan_forward`), and 05d's `scan_backward_rotated` (the reverse state pass, then
05c's one-kernel backward with the rotation's transpose). Also 05a's `phases_forward` alone, which now always sums in
fp64 and writes the pair: timed in that form only (no switch keeps the old one; its earlier figures, another day's:
`phases_split_h200.json`, `phase_sums_h200.json`). Shapes: the 434M model's micro-batch
at T=2048 (B=16) and T=8192 (B=4), H=16, complex N=64 -> M=128, D=64, chunk 64, bf16; decays of the model's initial
sizes (dt ~ N(0,1), Re A in [-1.1, -0.1]), where both forms agree to rounding (the outputs' max |diff| / max |ref| is in
each row). GPU time per call from a CUDA graph (`graph_ms`). Prints one JSON record; refuses on a CPU.

    python benchmarks/exp_alpha_pair.py --out benchmarks/results/alpha_pair_h200.json
"""
import argparse, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("exp_alpha_pair: needs a CUDA GPU")
    from common import emit, graph_ms, pair_scan_inputs, rel_diff
    from mamba3_lite.ssd.triton.phases import device_capability, phases_forward
    from mamba3_lite.ssd.triton.chunk_state import states_forward
    from mamba3_lite.ssd.triton.real_ssd import batch_head_pairs, scan_backward_rotated, scan_forward, state_blocks, tune_for
    rows, H, N, D, Q = [], 16, 64, 64, 64
    for Bsz, T in ((16, 2048), (4, 8192)):
        i = pair_scan_inputs(Bsz, T, H, N, D, Q)
        dt, A_re, A_im, alpha, alpha_lo, cos, sin, q, k, x, dy = i.values()
        tune = tune_for(device_capability(x))
        row = dict(B=Bsz, T=T, phases_forward_ms=round(graph_ms(lambda: phases_forward(dt, A_re, A_im, Q)), 4))
        outs = {}
        for form, lo in (("pair", alpha_lo), ("alpha alone", None)):
            states = states_forward(k, x, alpha, None, Q, **state_blocks(tune, batch_head_pairs(k)), alpha_lo=lo)[0]
            fwd = lambda: scan_forward(q, k, x, alpha, None, Q, tune, alpha_lo=lo)
            bwd = lambda: scan_backward_rotated(q, k, x, alpha, None, Q, dy, None, cos, sin, torch.bfloat16, states,
                                                tune, alpha_lo=lo)
            outs[form] = (fwd()[0], *bwd()[:5])                                   # y, dB_re, dB_im, dC_re, dC_im, dx
            row[form] = dict(forward_ms=round(graph_ms(fwd), 4), backward_ms=round(graph_ms(bwd), 4))
        row["alone_vs_pair_rel_diff"] = {n: float(f"{rel_diff(u, v):.2e}") for n, u, v in
                                         zip(("y", "dB_re", "dB_im", "dC_re", "dC_im", "dx"), outs["alpha alone"], outs["pair"])}
        rows.append(row); print(json.dumps(row), flush=True)
    emit({"shape": dict(H=H, M=2 * N, D=D, Q=Q, dtype="bf16"), "rows": rows}, device=torch.device("cuda"), out=a.out,
         benchmark="alpha_pair")


if __name__ == "__main__":
    main()
