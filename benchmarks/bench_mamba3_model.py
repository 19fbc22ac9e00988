"""Training throughput of the paper's Mamba-3 layer as our model variant (`ModelConfig(mixer="mamba3")`, chapter 09e).

The real training step (`Pretrainer.train_step`: bf16 autocast, fused AdamW, clipping, NaN guard) of the 434M geometry
(the `h200` preset: d_model 1024, 28 layers, 16 heads of 64, state 64 complex = 128 real, vocabulary padded to a
multiple of 64 where the field exists) with the chunked PyTorch scan of chapters 09c/09d or, for SISO, the Triton
scan of chapter 09f, compiled. Prints one JSON
record (benchmarks/common.py's format): tokens/s, step time, peak memory, beside the official Mamba-3 layer's figure.

    # the H200 figures (default: B=16, T=2048, compiled, SISO): the PyTorch scan, then the Triton scan (chapter 09f)
    python benchmarks/bench_mamba3_model.py
    ENABLE_TRITON_KERNELS=1 python benchmarks/bench_mamba3_model.py --ssd-dispatch triton
    python benchmarks/bench_mamba3_model.py --rank 4 --chunk 16      # MIMO rank 4 (the official layer uses chunk 64/r)
    # a CPU smoke run (tiny model, a few steps, eager): checks the script, measures nothing meaningful
    python benchmarks/bench_mamba3_model.py --smoke
"""
import argparse, tempfile, time

PEER = {"official Mamba-3 layer (issue 11: vocab padded, B=16, T=2048, an H200)": 89_370}


def run(a):
    import torch
    from dataclasses import fields
    from mamba3_lite.model import ModelConfig
    from mamba3_lite.pretrain import build_config
    from mamba3_lite.train.trainer import Pretrainer
    from common import emit, sync, time_fn                                    # benchmarks/common.py
    model = dict(mixer="mamba3", mimo_rank=a.rank, max_seq_len=a.seq, grad_checkpoint=a.grad_checkpoint,
                 ssd_dispatch=a.ssd_dispatch)
    if a.chunk: model["chunk_size"] = a.chunk
    if a.smoke: model.update(d_model=64, n_layers=2, n_heads=4, head_dim=16, state_dim=8, ffn_dim=128, chunk_size=a.chunk or 16)
    elif "pad_vocab_multiple" in {f.name for f in fields(ModelConfig)}: model["pad_vocab_multiple"] = 64
    over = dict(model=model, batch_size=a.batch, gradient_accumulation_steps=1, compile_model=a.compile,
                max_steps=10**6, warmup_steps=10, save_every=10**9, eval_every=0, log_every=10**9, sample_tokens=0,
                data_path=a.data, checkpoint_dir=tempfile.mkdtemp(prefix="bench_mamba3_"))
    if a.smoke: over["device"] = "cpu"
    cfg = build_config("tiny" if a.smoke else "h200", overrides=over)
    t = Pretrainer(cfg, echo=lambda m: None)
    cuda = t.device.type == "cuda"
    t0 = time.perf_counter()
    for _ in range(a.warmup): t.train_step()                                  # compilation happens here
    sync(t.device); warm = time.perf_counter() - t0
    if cuda: torch.cuda.reset_peak_memory_stats()
    losses = []
    timing = time_fn(lambda: losses.append(t.train_step()["loss"]), t.device, warmup=0, iters=a.steps)
    out = {"mixer": "mamba3", "mimo_rank": a.rank, "ssd_dispatch": a.ssd_dispatch,
           "scan": t.model.layers[0].scan.__name__ if hasattr(t.model.layers[0], "scan") else None, "chunk_size": cfg.model.chunk_size, "params": t.n_params,
           "batch": a.batch, "seq": a.seq, "compile": a.compile, "grad_checkpoint": a.grad_checkpoint,
           "padded_vocab": cfg.model.padded_vocab_size if hasattr(cfg.model, "padded_vocab_size") else cfg.model.vocab_size,
           "steps": a.steps, "warmup_s": round(warm, 1), "step_ms": round(1000 * timing["median_s"], 1),
           "step_ms_min": round(1000 * timing["min_s"], 1), "tokens_per_s": round(t.tokens_per_step / timing["median_s"]),
           "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if cuda else None,
           "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 1e9, 2) if cuda else None,
           "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)], "smoke": a.smoke, "peers": PEER}
    t.close()
    emit(out, device=t.device, out=a.out, benchmark="mamba3_model_train_step")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, default=1, help="mimo_rank: 1 = SISO")
    p.add_argument("--chunk", type=int, default=None, help="chunk_size (default: the preset's, 64)")
    p.add_argument("--batch", type=int, default=None); p.add_argument("--seq", type=int, default=None)
    p.add_argument("--steps", type=int, default=None); p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--no-compile", dest="compile", action="store_false", help="eager (default: torch.compile)")
    p.add_argument("--grad-checkpoint", action="store_true")
    p.add_argument("--ssd-dispatch", default="pytorch", choices=("pytorch", "triton"),
                   help="the SISO scan: chapter 09c's PyTorch form or 09f's Triton form (also set ENABLE_TRITON_KERNELS=1)")
    p.add_argument("--data", default="builtin")
    p.add_argument("--smoke", action="store_true", help="tiny model on the CPU, eager, 2 steps: a check of the script")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    defaults = dict(batch=2, seq=64, steps=2, warmup=1) if a.smoke else dict(batch=16, seq=2048, steps=10, warmup=3)
    for k, v in defaults.items():
        if getattr(a, k) is None: setattr(a, k, v)
    if a.smoke: a.compile = False
    run(a)


if __name__ == "__main__":
    main()
