"""Chapter 03b's chunked loss head at the 434M model's training shape (32,768 rows of d = 1,024, the tied weight of
50,304 x 1,024 in fp32, vocab 50,257, bf16 autocast) for several `chunk_rows`: GPU time of forward + backward (the
forward makes both gradients; 20 calls queued back to back, median of `--rounds` interleaved rounds), the peak memory
it adds above its inputs, and its loss and gradients against the 4,096-row default's (max |diff| / max |ref|). Each
block's weight gradient is added into one fp32 sum of 206 MB, read and written once a block: fewer, larger blocks move
less of it and hold a larger block of logits. Prints one JSON record; on a CPU it refuses. (Written on 2026-12-02 after
that session's GPU time had run out: its logic was checked on a CPU at small sizes, it has not run on a GPU yet.)

    python benchmarks/bench_loss_chunks.py --out benchmarks/results/loss_chunks_h200.json
"""
import argparse, statistics, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_loss_chunks: needs a CUDA GPU")
    from common import emit, queued_ms, rel_diff
    from mamba3_lite.loss import linear_cross_entropy
    M, d, V, Vp = 32768, 1024, 50257, 50304
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(M, d, device="cuda", generator=g).requires_grad_()
    W = (torch.randn(Vp, d, device="cuda", generator=g) * 0.02).requires_grad_()
    t = torch.randint(0, V, (M,), device="cuda", generator=g)

    def head(rows):
        def run():
            h.grad = W.grad = None
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = linear_cross_entropy(h, W, t, V, chunk_rows=rows)
            loss.backward()
            return loss.detach(), h.grad, W.grad
        return run
    choices = (2048, 4096, 8192, 16384)
    ref = [x.clone() for x in head(4096)()]
    res = {}
    for rows in choices:
        out = head(rows)()
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
        head(rows)(); torch.cuda.synchronize()
        res[rows] = {"chunk_rows": rows, "peak_added_gb": round((torch.cuda.max_memory_allocated() - base) / 1e9, 3),
                     "rel_diff_vs_4096": {n: rel_diff(o, r) for n, o, r in zip(("loss", "grad_h", "grad_W"), out, ref)},
                     "ms_rounds": []}
    for _ in range(a.rounds):
        for rows in choices:
            res[rows]["ms_rounds"].append(round(queued_ms(head(rows)), 4))
    for r in res.values(): r["ms"] = statistics.median(r["ms_rounds"])
    emit(list(res.values()), "cuda", a.out, rounds=a.rounds, note="linear_cross_entropy forward + backward under bf16 "
         "autocast; ms per call of 20 queued back to back; peak_added_gb: max_memory_allocated above the allocation before the call")


if __name__ == "__main__":
    main()
