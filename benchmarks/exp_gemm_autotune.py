"""Would Inductor's own GEMM kernels beat cuBLAS on the 434M model's GEMMs? An experiment before compiling the whole
model with `max_autotune_gemm` (which did not finish compiling in 280 s when tried on the full step).

Each GEMM of one block (the three forms autograd runs for `F.linear`, at one micro-batch's 32,768 rows: shapes from
`bench_gemm_shapes.layer_shapes`) is compiled on its own with `max_autotune_gemm` on (Inductor benchmarks its Triton
templates against cuBLAS and keeps the fastest), then timed against the eager `torch.mm` (cuBLAS) in interleaved rounds,
20 calls queued back to back per round. `--persistent-tma` adds Inductor's persistent TMA templates to the choices.
The per-block sum, times 28 layers and 2 micro-batches, is what the full step could gain at most (epilogue fusion
aside). Set TORCHINDUCTOR_CACHE_DIR to keep the tuning for a later full-model compile in the same machine.

    python benchmarks/exp_gemm_autotune.py --persistent-tma --out benchmarks/results/gemm_autotune_h200.json
"""
import argparse, statistics, sys, time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5); p.add_argument("--persistent-tma", action="store_true")
    p.add_argument("--search-space", default="DEFAULT", choices=["DEFAULT", "EXHAUSTIVE"])
    p.add_argument("--layers", type=int, default=28); p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("exp_gemm_autotune: needs a CUDA GPU")
    from bench_gemm_shapes import gemm_forms, layer_shapes
    from common import emit, queued_ms, use_gemm_templates
    use_gemm_templates(a.persistent_tma, a.search_space)
    per_block = {"in_proj 5136": 1, "out_proj (mixer folded)": 1, "ffn w1 / w3": 2, "ffn w2": 1}   # w1 and w3: two GEMMs
    shapes = {k: layer_shapes()[k] for k in per_block}
    results, eager, tuned = {}, {}, {}
    for name, s in shapes.items():
        for form, fn in gemm_forms(*s).items():
            key = (name, form)
            eager[key] = fn
            compiled = torch.compile(fn, dynamic=False)       # a closure over its operands: the GEMM alone
            t0 = time.perf_counter(); ref = fn(); out = compiled(); torch.cuda.synchronize()
            seconds = round(time.perf_counter() - t0, 1)
            err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            tuned[key] = compiled
            results.setdefault(name, {"rows": s[0], "d_in": s[1], "d_out": s[2]})[form] = {"compile_s": seconds, "max_rel_err": float(f"{err:.2e}")}
            print(name, form, seconds, "s", file=sys.stderr, flush=True)
    times = {(k, how): [] for k in eager for how in ("cublas", "tuned")}
    for _ in range(a.rounds):
        for k in eager:
            times[(k, "cublas")].append(queued_ms(eager[k])); times[(k, "tuned")].append(queued_ms(tuned[k]))
    saved = 0.0
    for (name, form) in eager:
        rows, d_in, d_out = shapes[name]
        r = results[name][form]
        for how in ("cublas", "tuned"):
            ms = statistics.median(times[((name, form), how)])
            r[how] = {"ms": round(ms, 4), "tflops": round(2 * rows * d_in * d_out / ms / 1e9, 1)}
        r["tuned_over_cublas"] = round(r["tuned"]["ms"] / r["cublas"]["ms"], 4)
        saved += (r["cublas"]["ms"] - r["tuned"]["ms"]) * per_block[name]
    emit({"shapes": results, "per_step_ms_saved_at_most": round(saved * a.layers * a.micro_batches, 2)}, "cuda", a.out,
         rounds=a.rounds, persistent_tma=a.persistent_tma, search_space=a.search_space,
         note="each GEMM compiled alone with max_autotune_gemm (ATEN,TRITON); ms per call of 20 queued back to back, median "
              "over interleaved rounds; per_step_ms_saved_at_most = sum over a block's GEMMs x layers x micro-batches")


if __name__ == "__main__":
    main()
