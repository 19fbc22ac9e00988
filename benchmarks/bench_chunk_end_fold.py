"""05c's one-kernel backward with the decay gradient's chunk-end terms added inside the kernel, against an earlier
version of the kernel that stores its pieces (k.dk_state per step, <G, S_in> per chunk) for `chunk_end_terms` to add
with five small PyTorch ops. The earlier `chunk_scan.py` is loaded from a file (`--old`, e.g. a `git archive` of the
commit before) beside the package's. At the 434M model's training shape (`common.rotated_backward_inputs`, bf16, the
rotation's transpose in the kernel); GPU time per call with 20 calls queued back to back (`common.queued_ms`), and
every output of the new path against the old one's. Prints one JSON record; on a CPU it refuses.

    python benchmarks/bench_chunk_end_fold.py --old .old/mamba3_lite/ssd/triton/chunk_scan.py --out benchmarks/results/chunk_end_fold_h200.json
"""
import argparse, importlib.util, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True, help="the earlier chunk_scan.py"); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_chunk_end_fold: needs a CUDA GPU")
    from common import emit, queued_ms, rotated_backward_inputs
    from mamba3_lite.ssd.triton import chunk_scan as new
    spec = importlib.util.spec_from_file_location("mamba3_lite.ssd.triton.old_chunk_scan", a.old)   # its relative imports: the package's
    old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
    q, k, x, dy, alpha, states, dstates, cos, sin = rotated_backward_inputs()
    Q = 64
    run = lambda m: (lambda: m.scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16))
    names = ("dB_re", "dB_im", "dC_re", "dC_im", "dx", "dalpha", "dtheta")
    flat = lambda r: (*r[0], r[1], r[2], r[3])
    ref, got = flat(run(old)()), flat(run(new)())
    rows = []
    for label, m in (("earlier kernel + chunk_end_terms", old), ("chunk-end terms in the kernel", new), 
                     ("earlier kernel + chunk_end_terms (again)", old), ("chunk-end terms in the kernel (again)", new)):
        rows.append(dict(path=label, ms=round(queued_ms(run(m)), 4))); print(json.dumps(rows[-1]), flush=True)
    diff = {n: dict(bit_equal=bool(torch.equal(u, v)),
                    rel=float(f"{((u.float() - v.float()).abs().max() / v.float().abs().max()).item():.2e}"))
            for n, u, v in zip(names, got, ref)}
    print(json.dumps(diff), flush=True)
    emit({"shape": "434M training micro-batch: B=16, T=2048, H=16, M=128, D=64, chunk 64, bf16", "paths": rows,
          "new_vs_old": diff}, device=torch.device("cuda"), out=a.out, benchmark="chunk_end_fold")


if __name__ == "__main__":
    main()
