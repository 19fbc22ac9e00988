#!/usr/bin/env python
"""Training-step throughput of the model: tokens/s and peak memory for forward + backward + clip + AdamW under
bf16 autocast, eager and/or torch.compile. Prints JSON (benchmarks/common.py's format: command, date, machine).

    python benchmarks/bench_model.py --modes eager,compile              # CUDA: default 433.7M model, B=16, T=2048
    python benchmarks/bench_model.py --modes eager --grad-checkpoint
    python benchmarks/bench_model.py --smoke                            # CPU: a small config, a few steps

The trainer's pieces (`mamba3_lite.train.optim`): `build_optimizer`, one AdamW over every parameter (A is two real
fp32 parameters per block), fused on CUDA, betas 0.9/0.95, wd 0.1 on matrices, 0 on the rest, via
`Mamba3Transformer.param_groups`; and `clip_grad_norm` at 1.0. Random token ids stand in for data. A mode that runs
out of memory is reported as such and the next mode still runs.
"""
import argparse
import gc
import itertools
import math
import sys
import time

import torch
import torch.nn.functional as F

from mamba3_lite.model import Mamba3Transformer, ModelConfig
from mamba3_lite.train.config import TrainingConfig
from mamba3_lite.train.metrics import PEAK_BF16_FLOPS
from mamba3_lite.train.optim import build_optimizer, clip_grad_norm
from common import emit, peak_memory_gib, sync, time_fn                       # benchmarks/common.py

SMOKE_CONFIG = dict(vocab_size=512, d_model=128, n_layers=2, n_heads=4, head_dim=32, state_dim=16, chunk_size=32,
                    ffn_dim=256, max_seq_len=256)


def run_mode(cfg, mode, args, device):
    torch.manual_seed(0)
    with torch.device(device):                                               # build and initialise on the device
        model = Mamba3Transformer(cfg)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    fwd = torch.compile(model) if mode == "compile" else model
    opt = build_optimizer(model, TrainingConfig())                           # the trainer's AdamW (fused on CUDA)
    params = list(model.parameters())
    B, T, V = args.batch, args.seq, cfg.vocab_size
    g = torch.Generator(device="cpu").manual_seed(0)
    batches = itertools.cycle([torch.randint(0, V, (B, T + 1), generator=g).to(device) for _ in range(2)])
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    losses = []

    def train_step():
        tokens = next(batches)
        with autocast:
            logits = fwd(tokens[:, :-1])                                     # (B, T, V) fp32
            loss = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        loss.backward()
        clip_grad_norm(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    t0 = time.perf_counter()
    for _ in range(args.warmup):                                             # compiles here in 'compile' mode
        train_step()
    sync(device)
    warmup_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    del losses[:]
    timing = time_fn(train_step, device, warmup=0, iters=args.steps)
    losses = [l.item() for l in losses]
    tok_s = B * T / timing["median_s"]
    res = {"mode": mode, "params": n_params, "batch": B, "seq": T, "tokens_per_step": B * T,
           "step_ms_median": round(timing["median_s"] * 1e3, 2), "step_ms_min": round(timing["min_s"] * 1e3, 2),
           "tokens_per_s": round(tok_s, 1), "warmup_steps": args.warmup, "warmup_s": round(warmup_s, 2),
           "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)] if losses else None,
           "loss_finite": all(math.isfinite(l) for l in losses)}
    res["model_tflops_per_s"] = round(6 * n_params * tok_s / 1e12, 2)        # 6 N FLOPs per token
    if device.type == "cuda":
        res["peak_mem_allocated_gib"] = peak_memory_gib(device)
        res["peak_mem_reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / 2 ** 30, 2)
        res["mfu_vs_989TF"] = round(6 * n_params * tok_s / PEAK_BF16_FLOPS["H200"], 4)
    del model, fwd, opt, params, batches
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--modes", default=None, help="comma list of eager,compile (default: eager)")
    p.add_argument("--compile", action="store_true", help="same as --modes compile")
    p.add_argument("--batch", type=int, default=None, help="default 16 (smoke: 2)")
    p.add_argument("--seq", type=int, default=None, help="default 2048 (smoke: 128)")
    p.add_argument("--steps", type=int, default=None, help="timed steps, default 10 (smoke: 3)")
    p.add_argument("--warmup", type=int, default=None, help="default 3 (smoke: 1)")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="bf16 = torch.autocast(bfloat16)")
    p.add_argument("--grad-checkpoint", action="store_true")
    p.add_argument("--tf32", action="store_true", help="allow TF32 for the fp32 matmuls (the SSD's einsums run in fp32)")
    p.add_argument("--smoke", action="store_true", help="small config, few steps: checks the script on a CPU")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    if device.type != "cuda" and not args.smoke:
        print("no CUDA device: the default 433.7M model at B=16, T=2048 is a GPU benchmark; running --smoke instead",
              file=sys.stderr)
        args.smoke = True
    args.batch = args.batch or (2 if args.smoke else 16)
    args.seq = args.seq or (128 if args.smoke else 2048)
    args.steps = args.steps or (3 if args.smoke else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    modes = ["compile"] if args.compile and args.modes is None else (args.modes or "eager").split(",")
    cfg = ModelConfig(**{**(SMOKE_CONFIG if args.smoke else {}), "grad_checkpoint": args.grad_checkpoint})

    results = []
    for mode in modes:
        try:
            res = run_mode(cfg, mode, args, device)
        except torch.OutOfMemoryError as e:
            res = {"mode": mode, "error": "out of memory", "detail": str(e).splitlines()[0]}
        results.append(res)
        print(f"# {mode}: {res}", file=sys.stderr, flush=True)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return emit(results, device=device, out=args.out, benchmark="train_step", config=cfg.to_dict(), dtype=args.dtype,
                smoke=args.smoke, tf32=args.tf32,
                step="forward + cross-entropy + backward + clip_grad_norm(1.0) + AdamW (one, fused on CUDA)")


if __name__ == "__main__":
    main()
