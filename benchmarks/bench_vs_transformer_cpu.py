"""Side by side on a CPU: the `tiny` preset's model and a Transformer of the same size, trained for the same tokens on the
same bytes, with the same recipe; prints JSON (validation bits per byte, parameters, tokens/s, machine) and saves a plot.

    python benchmarks/bench_vs_transformer_cpu.py                      # the tiny preset's budget, 1 thread
    python benchmarks/bench_vs_transformer_cpu.py --steps 300 --out benchmarks/results/vs_transformer_cpu.json

Both models see the same batches in the same order (the trainer's seeded sampler over the built-in Shakespeare corpus in
bytes, chapter 06e), the same AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), warm-up and cosine schedule and
gradient clipping as the tiny preset (chapter 07a), and are evaluated on the same validation windows (Macbeth and Twelfth
Night). The steps alternate, ours then the Transformer's, so both see the same machine: on a CPU shared with other jobs the
tokens/s of either would otherwise depend on what else ran at the time.

The Transformer is `baseline_transformer.TransformerLM` (pre-norm, RMSNorm, causal `F.scaled_dot_product_attention`, RoPE,
SwiGLU, tied embeddings: nanoGPT's design with today's usual parts), with our d_model, layer count and head width; its FFN
width is chosen so that its parameter count is as close to ours as the width allows.
"""
import argparse
import math
import time
from pathlib import Path

import torch

from common import emit
from baseline_transformer import TransformerLM
from mamba3_lite.model import Mamba3Transformer
from mamba3_lite.data.corpus import builtin_corpus
from mamba3_lite.data.loader import PretrainDataset, batches
from mamba3_lite.train.config import PRESETS, TrainingConfig
from mamba3_lite.train.optim import clip_grad_norm, lr_at, set_lr


def n_params(m) -> int: return sum(p.numel() for p in m.parameters())


def matched_transformer(cfg, target: int) -> TransformerLM:
    "The TransformerLM with our width, depth and head size whose parameter count is nearest `target` (FFN width in steps of 8)."
    m = cfg.model
    def build(ffn): return TransformerLM(vocab_size=m.vocab_size, d_model=m.d_model, n_layers=m.n_layers,
                                         n_heads=max(1, m.d_model // m.head_dim), ffn_dim=ffn, real_vocab=m.vocab_size)
    with torch.device("meta"):
        best = min(range(8, 8 * m.d_model + 1, 8), key=lambda f: abs(n_params(build(f)) - target))
    torch.manual_seed(cfg.seed)
    return build(best)


def adamw(model, cfg) -> torch.optim.AdamW:
    "AdamW as the trainer builds it (chapter 07b): decay on matrices, none on vectors."
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([dict(params=decay, weight_decay=cfg.weight_decay), dict(params=rest, weight_decay=0.0)],
                             lr=cfg.lr, betas=cfg.betas)


@torch.no_grad()
def evaluate(model, val, cfg, n_batches: int) -> float:
    "Mean cross-entropy (nats per byte) over the first `n_batches` validation micro-batches, in a fixed order."
    model.eval()
    sampler = val.sampler(cfg.batch_size, shuffle=False)
    losses = [model(x, targets=y).item() for _, (x, y) in zip(range(n_batches), batches(val, sampler))]
    model.train()
    return sum(losses) / len(losses)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, help="optimizer steps for each model (default: the tiny preset's max_steps)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steady on a shared machine)")
    ap.add_argument("--eval_every", type=int, default=100)
    ap.add_argument("--eval_batches", type=int, default=40, help="validation micro-batches per evaluation")
    ap.add_argument("--out", default="benchmarks/results/vs_transformer_cpu.json")
    ap.add_argument("--png", default=None, help="plot file (default: --out with .png)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    preset = TrainingConfig.from_dict(PRESETS["tiny"])
    cfg = TrainingConfig.from_dict({"max_steps": args.steps or preset.max_steps, "device": "cpu"}, base=preset)
    m = cfg.model
    data = builtin_corpus(tokenizer=cfg.tokenizer_name)
    train = PretrainDataset(data, m.max_seq_len, m.vocab_size, split="train")
    val = PretrainDataset(data, m.max_seq_len, m.vocab_size, split="val")
    torch.manual_seed(cfg.seed)
    ours = Mamba3Transformer(m)
    theirs = matched_transformer(cfg, n_params(ours))
    runs = {"mamba3_lite": ours, "transformer": theirs}
    opts = {k: adamw(v, cfg) for k, v in runs.items()}
    stats = {k: dict(params=n_params(v), busy_s=0.0, curve=[], train_loss=[]) for k, v in runs.items()}
    it = batches(train, train.sampler(cfg.batch_size, seed=cfg.seed), cycle=True)
    for step in range(cfg.max_steps):
        x, y = next(it)                                       # the same batch for both
        lr = lr_at(step, cfg)
        for k, model in runs.items():
            t0 = time.perf_counter()
            loss = model(x, targets=y)
            loss.backward()
            clip_grad_norm(list(model.parameters()), cfg.max_grad_norm)
            set_lr(opts[k], lr); opts[k].step(); opts[k].zero_grad(set_to_none=True)
            stats[k]["busy_s"] += time.perf_counter() - t0
            stats[k]["train_loss"].append(round(loss.item(), 4))
        if (step + 1) % args.eval_every == 0 or step + 1 == cfg.max_steps:
            for k, model in runs.items():
                v = evaluate(model, val, cfg, args.eval_batches)
                stats[k]["curve"].append([step + 1, round(v / math.log(2), 4)])
            print(f"step {step + 1}: " + ", ".join(f"{k} {s['curve'][-1][1]:.3f} bits/byte" for k, s in stats.items()), flush=True)
    tokens = cfg.max_steps * cfg.tokens_per_step
    results = {}
    for k, s in stats.items():
        results[k] = dict(params=s["params"], val_bits_per_byte=s["curve"][-1][1], tokens=tokens, train_seconds=round(s["busy_s"], 1),
                          tokens_per_s=round(tokens / s["busy_s"], 1), val_curve=s["curve"],
                          final_train_loss=s["train_loss"][-1])
    results["transformer"]["ffn_dim"] = theirs.layers[0].w1.out_features
    winner = min(("mamba3_lite", "transformer"), key=lambda k: results[k]["val_bits_per_byte"])
    png = args.png or str(Path(args.out).with_suffix(".png"))
    record = emit(results, out=args.out, threads=args.threads, steps=cfg.max_steps, batch=[cfg.batch_size, m.max_seq_len],
                  data="built-in Shakespeare corpus, bytes (Macbeth and Twelfth Night held out)", lower_bits_per_byte=winner,
                  recipe=dict(lr=cfg.lr, warmup_steps=cfg.warmup_steps, min_lr_ratio=cfg.min_lr_ratio, betas=list(cfg.betas),
                              weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm), plot=png)
    plot(record, png)


def plot(record: dict, png: str):
    "Validation bits per byte against training tokens, one line per model."
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 3.4)); ax = fig.subplots()
    per_step = record["results"]["mamba3_lite"]["tokens"] / record["steps"]
    for k, r in record["results"].items():
        s, v = zip(*r["val_curve"])
        ax.plot([x * per_step / 1e6 for x in s], v, "o-", ms=3,
                label=f"{k} ({r['params'] / 1e6:.2f}M params, {r['tokens_per_s']:,.0f} tok/s): {v[-1]:.3f}")
    ax.set_xlabel("training tokens (millions of bytes)"); ax.set_ylabel("validation bits per byte"); ax.legend(fontsize=8)
    ax.set_title(f"same data, same budget, {record['threads']} CPU thread(s)", fontsize=10)
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.15, top=0.9)
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
