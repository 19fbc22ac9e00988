"""The 434M model's GEMMs one by one, at the training shape of one micro-batch (B=16 x T=2048 = 32,768 rows, bf16), in
the three forms autograd runs for `F.linear(x, W)`: forward `x @ W.T`, input gradient `dy @ W`, weight gradient
`dy.T @ x`. Each is timed with CUDA events around 20 calls queued back to back (as a training step queues them: no
launch latency in the figure), median over `--rounds` interleaved rounds, and reported in TF/s, so the layer's GEMM
time can be read shape by shape against the card's best. A large square GEMM (8192^3) gives that best.

The in_proj's width, H(D + 4N + 1) = 5,136 columns, is 16 past a multiple of 128: the last column tile of every GEMM
that produces or reduces over it is nearly empty. The script also times the same GEMMs at other widths (5,120: without
the 16 dt columns; 5,248 and 5,376: padded up to 41 x 128 and 21 x 256 columns) and the dt columns as a GEMM of their
own, to see whether a padded or split projection would pay. Prints one JSON record; on a CPU it refuses.

    python benchmarks/bench_gemm_shapes.py --out benchmarks/results/gemm_shapes_h200.json
"""
import argparse, statistics, sys

import torch


def gemm_forms(rows: int, d_in: int, d_out: int, device="cuda", dtype=torch.bfloat16) -> dict:
    "The three GEMMs of `F.linear` for a (rows, d_in) input and a (d_out, d_in) weight, as zero-argument callables."
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, d_in, device=device, dtype=dtype, generator=g)
    w = torch.randn(d_out, d_in, device=device, dtype=dtype, generator=g) * d_in ** -0.5
    dy = torch.randn(rows, d_out, device=device, dtype=dtype, generator=g)
    return {"fwd": lambda: torch.mm(x, w.t()), "dgrad": lambda: torch.mm(dy, w), "wgrad": lambda: torch.mm(dy.t(), x)}


def layer_shapes(rows=32768, d_model=1024, n_heads=16, head_dim=64, state_dim=64, ffn_dim=2048) -> dict:
    "name -> (rows, d_in, d_out) of every GEMM in one block of the model, plus the in_proj width variants."
    H, D, N = n_heads, head_dim, state_dim
    width = H * (D + 4 * N + 1)
    shapes = {f"in_proj {width}": (rows, d_model, width), "out_proj (mixer folded)": (rows, H * D, d_model),
              "ffn w1 / w3": (rows, d_model, ffn_dim), "ffn w2": (rows, ffn_dim, d_model)}
    for alt in (width - H, 41 * 128, 21 * 256):
        shapes[f"in_proj {alt}"] = (rows, d_model, alt)
    shapes[f"in_proj dt only {H}"] = (rows, d_model, H)
    shapes["square 8192 (the card's best)"] = (8192, 8192, 8192)
    return shapes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_gemm_shapes: needs a CUDA GPU")
    from common import emit, queued_ms
    shapes = layer_shapes()
    calls = {(name, form): fn for name, s in shapes.items() for form, fn in gemm_forms(*s).items()}
    times = {key: [] for key in calls}
    for _ in range(a.rounds):
        for key, fn in calls.items():
            times[key].append(queued_ms(fn))
    results = {}
    for (name, form), ts in times.items():
        rows, d_in, d_out = shapes[name]
        ms = statistics.median(ts)
        results.setdefault(name, {"rows": rows, "d_in": d_in, "d_out": d_out})[form] = {
            "ms": round(ms, 4), "tflops": round(2 * rows * d_in * d_out / ms / 1e9, 1)}
    for r in results.values():
        r["ms_three_forms"] = round(sum(r[f]["ms"] for f in ("fwd", "dgrad", "wgrad")), 4)
    emit(results, "cuda", a.out, rounds=a.rounds, note="torch.mm in F.linear's three layouts; ms per call of 20 queued back "
         "to back, median over interleaved rounds; TF/s = 2 rows d_in d_out / time")


if __name__ == "__main__":
    main()
