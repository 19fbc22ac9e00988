"""The loss head's softmax pass at the 434M model's training shape (one block of 4,096 rows x 50,304 columns, vocab
50,257, bf16): chapter 03b's `ce_chunk` compiled by `torch.compile` against chapter 05f's Triton `ce_chunk_inplace` over
column blocks and warps, GPU time per call from CUDA events (median of 20), each variant's gradient and loss against
the compiled pass's (max |diff|). Then the whole chunked head (`linear_cross_entropy`, forward which also makes the
gradients, M = 32,768 rows) as the package runs it. Prints one JSON record; on a CPU it refuses.

    python benchmarks/bench_ce_kernel.py --out benchmarks/results/ce_kernel_h200.json
"""
import argparse, itertools, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_ce_kernel: needs a CUDA GPU")
    from common import cuda_event_ms as timed, emit
    from mamba3_lite.loss import ce_chunk, linear_cross_entropy
    from mamba3_lite.loss_triton import ce_chunk_inplace, BLOCK_V, NUM_WARPS
    m, V, Vp = 4096, 50257, 50304
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = (3 * torch.randn(m, Vp, device="cuda", generator=g)).bfloat16()
    t = torch.randint(0, V, (m,), device="cuda", generator=g)
    compiled = torch.compile(ce_chunk, dynamic=False)
    ref_loss, ref_grad = compiled(logits, t, V)
    buf = logits.clone()
    rows = [{"variant": "ce_chunk, torch.compile", "ms": round(timed(lambda: compiled(logits, t, V)), 4)}]
    copy_ms = timed(lambda: buf.copy_(logits))                         # the copy that restores the logits is not the kernel's
    for bv, w in itertools.product((1024, 2048, 4096, 8192), (4, 8, 16)):
        def run(): buf.copy_(logits); return ce_chunk_inplace(buf, t, V, block_v=bv, num_warps=w)
        try:
            ms = timed(run) - copy_ms
            loss, grad = run()
            rows.append({"variant": f"triton block_v={bv} warps={w}", "block_v": bv, "num_warps": w, "ms": round(ms, 4),
                         "grad_max_abs_diff": (grad.float() - ref_grad.float()).abs().max().item(),
                         "loss_rel_diff": abs(loss.item() - ref_loss.item()) / abs(ref_loss.item())})
        except Exception as e:                                         # a launch this GPU refuses: say so, go on
            rows.append({"variant": f"triton block_v={bv} warps={w}", "error": str(e)[:200]})
    gb = 3 * m * Vp * 2 / 1e9                                          # read twice, written once
    for r in rows:
        if "ms" in r: r["effective_TB_s"] = round(gb / r["ms"], 2)
    M, d = 32768, 1024
    h = torch.randn(M, d, device="cuda", generator=g).bfloat16()
    W = (0.02 * torch.randn(Vp, d, device="cuda", generator=g)).bfloat16()
    tt = torch.randint(0, V, (M,), device="cuda", generator=g)
    head = {"rows": M, "d": d, "default_block_v": BLOCK_V, "default_num_warps": NUM_WARPS,
            "linear_cross_entropy_fwd_ms": round(timed(lambda: linear_cross_entropy(h, W, tt, V), iters=10), 3)}
    emit({"softmax_pass": rows, "head": head}, device="cuda", out=a.out, benchmark="ce_kernel")


if __name__ == "__main__":
    main()
