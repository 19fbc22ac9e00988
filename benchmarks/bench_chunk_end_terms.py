"""Where the decay gradient's chunk-end terms are added, two ways, at the 434M model's training shape
(`common.rotated_backward_inputs`: B=16, T=2048, H=16, M=128, D=64, chunk 64, bf16): 05c's one-kernel backward, then
`chunk_end_terms` (five small PyTorch ops), then 05a's `phases_backward`; against the one kernel handing its pieces
to `phases_backward(end_terms=...)`, whose kernel adds them. GPU time per call with 20 calls queued back to back
(`common.queued_ms`), each way twice in alternation, and the gradients of dt, A_re and A_im of the two ways compared.
Prints one JSON record; on a CPU it refuses.

    python benchmarks/bench_chunk_end_terms.py --out benchmarks/results/chunk_end_terms_h200.json
"""
import argparse, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_chunk_end_terms: needs a CUDA GPU")
    from common import emit, queued_ms, rel_diff, rotated_backward_inputs
    from mamba3_lite.ssd.triton.chunk_scan import chunk_end_terms, scan_backward_chunk
    from mamba3_lite.ssd.triton.phases import phases_backward
    q, k, x, dy, alpha, states, dstates, cos, sin = rotated_backward_inputs()
    Bsz, T, H, Q = q.shape[0], q.shape[1], q.shape[2], 64
    g = torch.Generator(device="cuda").manual_seed(1)
    dt = torch.randn(Bsz, T, H, device="cuda", generator=g).bfloat16()
    A_re, A_im = -torch.rand(H, device="cuda", generator=g), torch.randn(H, device="cuda", generator=g)
    chunk = lambda apart: scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                              end_terms_apart=apart)

    def in_pytorch():
        _, _, dalpha, dth = chunk(False)
        return phases_backward(dt, A_re, A_im, dalpha, dth, None, Q)

    def in_phases_kernel():
        _, _, (da, kdk, gs), dth = chunk(True)
        return phases_backward(dt, A_re, A_im, da, dth, None, Q, end_terms=(kdk, gs, alpha))

    ref, got = in_pytorch(), in_phases_kernel()
    _, _, (da, kdk, gs), _ = chunk(True)
    rows = [dict(path="chunk_end_terms alone", ms=round(queued_ms(lambda: chunk_end_terms(da, kdk, gs, alpha, Q)), 4))]
    for _ in range(2):
        rows.append(dict(path="one kernel + chunk_end_terms + phases_backward (main)", ms=round(queued_ms(in_pytorch), 4)))
        rows.append(dict(path="one kernel + phases_backward(end_terms)", ms=round(queued_ms(in_phases_kernel), 4)))
    for r in rows: print(json.dumps(r), flush=True)
    diff = {n: float(f"{rel_diff(u, v):.2e}") for n, u, v in zip(("ddt", "dA_re", "dA_im"), got, ref)}
    print(json.dumps(diff), flush=True)
    emit({"shape": "B=16, T=2048, H=16, M=128, D=64, chunk 64, bf16", "paths": rows, "rel_diff_vs_main": diff},
         device=torch.device("cuda"), out=a.out, benchmark="chunk_end_terms")


if __name__ == "__main__":
    main()
