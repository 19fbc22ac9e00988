"""Ways to spend less GPU time in a training step (around the update, and in Inductor's own kernels), each tried on
the trainer's real step in a process of its own beside the trainer as it is. An experiment: none of them is in the
package.

- `clip_in_adamw`: the clip coefficient handed to fused AdamW as its `grad_scale` (the kernel divides each gradient
  as it reads it) instead of `_foreach_mul_` over every gradient before the update.
- `foreach_accumulate`: a later micro-batch's gradients are left to autograd as new tensors (no add a parameter,
  ~300 launches a step) and then added to the earlier sum by one `_foreach_add_`. Bit-identical: fp32 addition commutes.
- `combo_kernels`, `aggressive_fusion`, `max_autotune_pointwise`, `max_autotune_gemm`: Inductor options set before the
  model compiles (its first step): fewer launches, larger fused kernels, tuned block sizes for its own kernels, its
  Triton GEMM templates against cuBLAS (see `exp_gemm_autotune.py`, which tunes the GEMMs alone first).
- `compiled_autograd`: every backward traced and compiled whole (torch._dynamo's compiled autograd), so the second
  micro-batch's bf16→fp32 gradient casts and the accumulation can fuse. The loss is scaled by a 0-d tensor: with the
  trainer's Python divisor Inductor failed on torch 2.11 (`results/compiled_autograd_h200_failed.log`).

On a GPU each run reports its steps' GPU time (CUDA events at each step's start, as `diag_step_jitter.py`) and the
card's clock over them (`common.ClockLog`): at the H200's power cap tokens/s follow the SM clock, so compare
`tokens_per_s_per_mhz` across runs made one after the other. Every run's losses and gradient norms are compared with
the first `base` run's step by step; compiled runs are not bit-reproducible (a CPU's threaded reductions), so name
`base` twice in `--variants` to see what two runs of the same code differ by. Prints one JSON record.

    ENABLE_TRITON_KERNELS=1 python benchmarks/exp_step_variants.py --out benchmarks/results/step_variants_h200.json
    python benchmarks/exp_step_variants.py --preset tiny --steps 4 --variants base base clip_in_adamw foreach_accumulate compiled_autograd
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

import torch

from common import ClockLog, emit, sync, timed_steps, use_gemm_templates

VARIANTS = ("base", "clip_in_adamw", "foreach_accumulate", "compiled_autograd", "combo_kernels", "aggressive_fusion",
            "max_autotune_pointwise", "max_autotune_gemm")


def clip_in_adamw(t):
    "The trainer's `clip_grad_norm` replaced by one that measures the norm and leaves the scaling to fused AdamW."
    from mamba3_lite.train import trainer
    def clip(params, max_norm):
        total = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], 2.0).float()
        t.optimizer.grad_scale = ((total + 1e-6) / max_norm).clamp(min=1.0)      # 1 / the coefficient clip_grad_norm multiplies by
        return total
    trainer.clip_grad_norm = clip


def foreach_accumulate(t):
    "Each later micro-batch's gradients arrive as new tensors; one `_foreach_add_` sums them with the earlier ones."
    one = t._micro_step
    def micro_step(last):
        earlier = [p.grad for p in t.params]
        if all(g is None for g in earlier): return one(last)
        for p in t.params: p.grad = None
        loss = one(last)
        pairs = [(p, g) for p, g in zip(t.params, earlier) if g is not None]
        for p, g in pairs:
            if p.grad is None: p.grad = g                  # no gradient this micro-batch: the earlier sum stands
        summed = [(p.grad, g) for p, g in pairs if p.grad is not g]
        if summed: torch._foreach_add_([a for a, _ in summed], [b for _, b in summed])
        return loss
    t._micro_step = micro_step


def compiled_autograd(t):
    "`_micro_step` with its backward under compiled autograd and the loss scaled by a tensor."
    from torch._dynamo import compiled_autograd as ca
    def micro_step(last):
        x, y = next(t._batches)
        with t._sync_context(last), t.autocast():
            loss = t._loss(x, y)
        scale = torch.full((), 1 / t.cfg.gradient_accumulation_steps, device=loss.device)
        with ca._enable(torch.compile): (loss * scale).backward()
        t._batches.prefetch()
        return loss.detach().float()
    t._micro_step = micro_step


def combo_kernels(t):
    "Inductor's combo kernels: independent kernels of a graph (e.g. the norms' weight-gradient sums) as one launch."
    import torch._inductor.config as inductor
    inductor.combo_kernels = True


def aggressive_fusion(t):
    "Inductor fuses nodes even where they share no memory access (fewer, larger kernels)."
    import torch._inductor.config as inductor
    inductor.aggressive_fusion = True


def max_autotune_pointwise(t):
    "Inductor benchmarks block sizes for each pointwise and reduction kernel (not the GEMMs: they stay cuBLAS)."
    import torch._inductor.config as inductor
    inductor.max_autotune_pointwise = True


def max_autotune_gemm(t):
    "Inductor's Triton GEMM templates (persistent TMA ones too) benchmarked against cuBLAS for each GEMM, the fastest kept."
    use_gemm_templates(persistent_tma=True)


def one_run(a) -> dict:
    "The trainer with `a.variant` applied: `a.warmup` steps, then `a.steps` timed ones with their loss and grad norm."
    os.environ["ENABLE_TRITON_KERNELS"] = "1"
    from mamba3_lite.pretrain import build_config
    from mamba3_lite.train.optim import build_optimizer
    from mamba3_lite.train.trainer import Pretrainer
    gpu = a.preset != "tiny"
    over = dict(batch_size=a.batch, gradient_accumulation_steps=a.accum, compile_model=True, max_steps=10**6, warmup_steps=10, save_every=10**9,
                eval_every=0, log_every=10**9, sample_tokens=0, checkpoint_dir=tempfile.mkdtemp(prefix="variants_"))
    if gpu: over["model"] = dict(max_seq_len=a.seq, ssd_dispatch="triton")
    t = Pretrainer(build_config(a.preset, overrides=over), echo=lambda m: None, progress=False)
    if not gpu: t.optimizer = build_optimizer(t.model, t.cfg, fused=True)     # grad_scale needs fused AdamW (CPU has one)
    if a.variant != "base": globals()[a.variant](t)
    step = lambda: t.train_step(look_ahead=True)
    for _ in range(a.warmup): step()
    sync(t.device)
    with ClockLog() as clocks: rows = timed_steps(step, a.steps, t.device)
    steady = rows[1:-1] or rows                     # the ends hold the look-ahead's edges
    ms = [r["gpu_ms"] if gpu else r["host_ms"] for r in steady]
    c = clocks.between(steady[0]["host_start"], steady[-1]["host_start"] + steady[-1]["host_ms"] / 1e3)
    tok_s = t.tokens_per_step / (statistics.mean(ms) / 1e3)
    out = {"variant": a.variant, "step_ms_mean": round(statistics.mean(ms), 2), "timed_on": "gpu" if gpu else "host",
           "tokens_per_s": round(tok_s), "clocks": c, "tokens_per_s_per_mhz": round(tok_s / c["sm_mhz"], 2) if c else None,
           "losses": [r["out"]["loss"] for r in rows], "grad_norms": [r["out"]["grad_norm"] for r in rows],
           "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 1e9, 2) if gpu else None}
    t.close()
    return out


def rel(a: list, b: list) -> list:
    "|a - b| / |b| step by step (the first step's gradients are the variant's own; later steps also carry its updates)."
    return [float(f"{abs(x - y) / max(abs(y), 1e-30):.2e}") for x, y in zip(a, b)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--preset", default="h200", choices=["h200", "tiny"], help="tiny: the CPU check of the variants' numbers")
    p.add_argument("--seq", type=int, default=2048); p.add_argument("--batch", type=int, default=16)
    p.add_argument("--accum", type=int, default=2); p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--timeout", type=int, default=600, help="seconds a variant's process may take")
    p.add_argument("--variant", help=argparse.SUPPRESS)             # set in the child process that runs one variant
    p.add_argument("--out")
    a = p.parse_args()
    if a.variant:
        print(json.dumps(one_run(a))); return
    if a.preset == "h200" and not torch.cuda.is_available(): sys.exit("exp_step_variants: the h200 preset needs a CUDA GPU (--preset tiny on a CPU)")
    if a.preset == "tiny": a.batch = min(a.batch, 4)
    runs = []
    for v in a.variants:
        cmd = [sys.executable, __file__, "--variant", v, "--preset", a.preset, "--seq", str(a.seq), "--batch", str(a.batch),
               "--accum", str(a.accum), "--warmup", str(a.warmup), "--steps", str(a.steps)]
        try: proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            runs.append({"variant": v, "error": f"did not finish in {a.timeout} s"}); continue
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else
                    {"variant": v, "returncode": proc.returncode, "stderr_tail": proc.stderr[-1500:]})
        print(json.dumps({k: v for k, v in runs[-1].items() if k not in ("losses", "grad_norms")}), file=sys.stderr, flush=True)
    base = next((r for r in runs if r["variant"] == "base" and "losses" in r), None)
    for r in runs:
        if base and "losses" in r:
            r["vs_base"] = {"loss_rel_diff": rel(r["losses"], base["losses"]), "grad_norm_rel_diff": rel(r["grad_norms"], base["grad_norms"]),
                            "step_ms_ratio": round(r["step_ms_mean"] / base["step_ms_mean"], 4)}
    emit({"config": {"preset": a.preset, "seq": a.seq, "batch": a.batch, "accum": a.accum, "steps": a.steps}, "runs": runs},
         device="cuda" if a.preset == "h200" else None, out=a.out, benchmark="train_step_variants")


if __name__ == "__main__":
    main()
