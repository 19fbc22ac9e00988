"""Issue-10 speed sweep in one run on one GPU: training tokens/s of our model (Triton and PyTorch SSD paths, compiled)
beside a same-size Transformer (SDPA + compile, same vocabulary padding, same fused AdamW, same batch), at T=2048 and
8192, all in this script's own loop; the `h200` preset through the real command line (`cli`: bench_cli.py's runs);
decode ms/token (chapter 04's `generate` vs chapter 04a's `Decoder`) after 128 / 2k / 8k-token prompts at batch 1
and 64; a kernel-time profile of our training step. Prints one JSON record (benchmarks/common.py) and writes it to --out.

    python benchmarks/bench_speed.py --sections train,cli,decode,profile --out benchmarks/results/speed_h200.json
    python benchmarks/bench_speed.py --smoke          # CPU: tiny shapes, every code path once (no cli)

Sections run in the order `--sections` names them: `cli,train` puts the command-line runs first, on a card the other
runs have not yet warmed. With `--out F`, each record is also appended to `F.partial.jsonl` as soon as it is measured,
so a run cut short (a time limit) keeps what it finished. `--cli_min 185000` ends the run after the first command-line
run below 185,000 tokens/s (a card too slow for the goal; the record says where it stopped).

Every training configuration runs in its own process (clean peak memory, clean compile caches). Each timed stretch
carries the card's mean SM clock (`common.ClockLog`): an H200 at its 700 W cap runs at the clock its silicon holds,
so configurations compare by their tokens/s per MHz as well as by their tokens/s.
MFU = 6 * params * tokens/s / 989 TFLOP/s (H100/H200 dense bf16 datasheet).
"""
import argparse, json, os, subprocess, sys, time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK = 989e12
TRAIN = [  # name, model, dispatch, seq, batch, pad, fused loss
    ("ours triton compiled, h200 preset (pad 64, fused CE)", "lite", "triton", 2048, 16, 64, True),
    ("ours triton compiled, pad 64, plain CE", "lite", "triton", 2048, 16, 64, False),
    ("ours triton compiled, vocab 50257, plain CE (before)", "lite", "triton", 2048, 16, 1, False),
    ("ours pytorch compiled, pad 64, fused CE", "lite", "pytorch", 2048, 16, 64, True),
    ("Transformer SDPA compiled, vocab 50304", "transformer", "-", 2048, 16, 64, False),
    ("ours triton compiled, T=8192, pad 64, fused CE", "lite", "triton", 8192, 4, 64, True),
    ("Transformer SDPA compiled, T=8192, vocab 50304", "transformer", "-", 8192, 4, 64, False),
]


def build(kind, dispatch, seq, pad, fused, smoke):
    from mamba3_lite.model import Mamba3Transformer, ModelConfig
    from baseline_transformer import TransformerLM
    size = dict(d_model=64, n_layers=2, n_heads=4, head_dim=16, state_dim=8, ffn_dim=128) if smoke else {}
    if kind == "transformer":
        t = dict(d_model=64, n_layers=2, n_heads=4, ffn_dim=192) if smoke else {}
        return TransformerLM(**t)
    if dispatch == "triton": os.environ["ENABLE_TRITON_KERNELS"] = "1"
    return Mamba3Transformer(ModelConfig(max_seq_len=seq, ssd_dispatch=dispatch, pad_vocab_multiple=pad,
                                         fused_cross_entropy=fused, **size))


def train_one(spec, smoke, compile_mode="default"):
    "Tokens/s, step time, peak memory of compiled training steps (bf16 autocast, fused AdamW, clipping)."
    name, kind, dispatch, seq, batch, pad, fused = spec
    if smoke: seq, batch = 64, 2
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = build(kind, dispatch, seq, pad, fused, smoke).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=dev.type == "cuda")
    cmodel = torch.compile(model, mode=compile_mode) if dev.type == "cuda" else model
    g = torch.Generator(device="cpu").manual_seed(0)
    data = torch.randint(0, 50257, (8, batch, seq + 1), generator=g).to(dev)
    losses, i = [], [0]
    def step():
        xy = data[i[0] % 8]; i[0] += 1
        if dev.type == "cuda": torch.compiler.cudagraph_mark_step_begin()   # CUDA graphs: each step may reuse the last one's outputs
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = cmodel(xy[:, :-1], targets=xy[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().clone())      # a graph output (the Transformer's loss) is overwritten by the next replay
    from common import time_fn, sync
    t0 = time.perf_counter()
    for _ in range(1 if smoke else 3): step()
    sync(dev); warm = time.perf_counter() - t0
    warm_peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None   # CUDA graphs allocate their pool in the warm-up
    if dev.type == "cuda": torch.cuda.reset_peak_memory_stats()
    timed_from = time.time()
    t = time_fn(step, dev, warmup=0, iters=2 if smoke else 10)
    timed = [timed_from, time.time()]                  # unix seconds: the parent reads the card's clock over them
    tok_s = batch * seq / t["median_s"]
    return {"name": name, "model": kind, "dispatch": dispatch, "seq": seq, "batch": batch, "pad_vocab_multiple": pad, "compile_mode": compile_mode,
            "fused_cross_entropy": fused, "params": n_params, "warmup_s": round(warm, 1),
            "step_ms": round(1000 * t["median_s"], 1), "tokens_per_s": round(tok_s),
            "mfu": round(6 * n_params * tok_s / PEAK, 4),
            "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if dev.type == "cuda" else None,
            "peak_mem_with_warmup_gb": round(max(warm_peak, torch.cuda.max_memory_allocated()) / 1e9, 2) if dev.type == "cuda" else None,
            "reserved_gb": round(torch.cuda.max_memory_reserved() / 1e9, 2) if dev.type == "cuda" else None,
            "loss_first_last": [round(losses[0].item(), 3), round(losses[-1].item(), 3)], "timed_unix": timed}


PARTIAL = None   # with --out: `<out>.partial.jsonl`, each record appended as it finishes (a run cut short keeps them)


def keep(rec):
    "Print a finished record (one JSON line) and append it to the partial file, if any."
    line = json.dumps(rec)
    print(line, flush=True)
    if PARTIAL:
        with open(PARTIAL, "a") as f: f.write(line + "\n")


def per_mhz(rec: dict, clocks) -> dict:
    "`rec` with the card's clock over its timed stretch (`timed_unix`, dropped) and its tokens/s per MHz."
    window = rec.pop("timed_unix", None)
    c = clocks.between(*window) if window else None
    if c: rec.update(clocks=c, tokens_per_s_per_mhz=round(rec["tokens_per_s"] / c["sm_mhz"], 1))
    return rec


def cli(steps: int, least: float | None = None) -> list[dict]:
    """The `h200` preset as a user runs it (bench_cli.py): T=2048 x 16 and T=8192 x 4, each its own CLI run. `least`:
    stop after a run below this many tokens/s (the record then says so)."""
    import tempfile
    from pathlib import Path
    from bench_cli import run_cli
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for seq, batch in ((2048, 16), (8192, 4)):
            rec = run_cli(seq, batch, steps, 4, "h200", [], Path(tmp))
            if rec.get("clocks"): rec["tokens_per_s_per_mhz"] = round(rec["tokens_per_s"] / rec["clocks"]["sm_mhz"], 1)
            if least and rec.get("tokens_per_s", 0) < least: rec["stopped"] = f"no figure at or above --cli_min {least:g}: the run ends here"
            keep(rec); out.append(rec)
            if "stopped" in rec: break
    return out


def decode(smoke):
    "ms per new token after a prompt: chapter 04's generate (eager) vs chapter 04a's Decoder (compiled, CUDA graph)."
    from mamba3_lite.decode import Decoder
    from common import sync
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = build("lite", "pytorch", 8192, 64, False, smoke).to(dev).eval()
    out = []
    # fp32 first: the decoder's greedy tokens must be generate's exactly
    prompt = torch.randint(0, 50257, (1, 128 if not smoke else 16), device=dev)
    ref, fast = model.generate(prompt, 32, temperature=0), Decoder(model, 1).generate(prompt, 32, temperature=0)
    out.append({"check": "fp32 greedy, batch 1, context 128, 32 new tokens", "same_tokens": bool(torch.equal(ref, fast))})
    if dev.type == "cuda":                      # bf16 weights for speed; A (the eigenvalues) stays fp32
        model = model.to(torch.bfloat16)
        for b in model.layers: b.A_log.data, b.A_imag.data = b.A_log.data.float(), b.A_imag.data.float()
        torch._dynamo.reset()                   # parameters' dtypes are not guarded: compile the step afresh
    cases = [(1, 16), (1, 32)] if smoke else [(1, 128), (1, 2048), (1, 8192), (64, 128), (64, 2048)]
    decoders = {}
    for batch, ctx in cases:
        prompt = torch.randint(0, 50257 if not smoke else 50257, (batch, ctx), device=dev)
        n_new = 8 if smoke else 64
        rec = {"batch": batch, "context": ctx, "new_tokens": n_new}
        for name in ("generate", "Decoder"):
            def run(n):
                if name == "generate": return model.generate(prompt, n, temperature=0)
                return decoders.setdefault(batch, Decoder(model, batch)).generate(prompt, n, temperature=0)
            run(n_new); sync(dev)                                              # compile / capture / warm-up
            times = {}
            for n in (1, n_new):                                               # prefill + n tokens; the difference is decode
                t0 = time.perf_counter(); toks = run(n); sync(dev); times[n] = time.perf_counter() - t0
            rec[name + "_ms_per_token"] = round(1000 * (times[n_new] - times[1]) / (n_new - 1), 3)
            rec[name + "_prefill_ms"] = round(1000 * times[1], 2)
            rec[name + "_tokens"] = toks[:, ctx:].tolist() if batch == 1 else None
        rec["same_tokens_bf16"] = rec.pop("generate_tokens") == rec.pop("Decoder_tokens")
        rec["Decoder_tokens_per_s_per_sequence"] = round(1000 / rec["Decoder_ms_per_token"]) if rec["Decoder_ms_per_token"] > 0 else None
        out.append(rec)
    return out


# chapter 05's kernels (names as the profiler shows them); everything else eager lands in "other"
SSD_KERNELS = ("scan_fwd_kernel", "bwd_dx_kernel", "bwd_dqdk_kernel", "bwd_chunk_kernel", "state_fwd_kernel",
               "state_bwd_kernel", "rotate_fwd_kernel", "rotate_bwd_kernel", "phases_fwd_kernel", "phases_bwd_kernel", "tile_sums_kernel")


def profile(smoke):
    "GPU time per kernel over 3 compiled training steps of the h200-preset model (Triton SSD)."
    if not torch.cuda.is_available(): return {"skipped": "no CUDA"}
    from torch.profiler import ProfilerActivity, profile as prof
    from common import compiled_train_step, kernel_rows
    step = compiled_train_step(build("lite", "triton", 2048, 64, True, smoke).cuda(), clip=1.0)
    for _ in range(3): step()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3): step()
        torch.cuda.synchronize()
    rows = kernel_rows(p, 3)
    total = sum(r[1] for r in rows)
    cat = {}
    for k, ms, _ in rows:
        c = ("gemm" if any(s in k.lower() for s in ("gemm", "cutlass", "sm90", "nvjet", "cublas")) else
             "loss head triton" if k.startswith("ce_rows") else
             "ssd triton" if k.startswith(SSD_KERNELS) else
             "inductor fused" if k.startswith("triton_") else
             "optimizer, grad clip" if "multi_tensor_apply" in k or "adam" in k.lower() else "other")
        cat[c] = round(cat.get(c, 0) + ms, 2)
    return {"gpu_ms_per_step": round(total, 2), "by_category_ms": cat,
            "top_kernels": [{"kernel": k[:120], "ms_per_step": round(ms, 3), "calls_per_step": n} for k, ms, n in rows[:60]]}


def train_section(a) -> list[dict]:
    "Each selected TRAIN configuration in its own process, with the card's clock over its run."
    from common import ClockLog
    out = []
    for i, spec in enumerate(TRAIN):
        if a.only and a.only not in spec[0]: continue
        if a.idx and str(i) not in a.idx.split(","): continue
        t0 = time.perf_counter()
        env = {**os.environ, **({"TRITON_INTERPRET": "1"} if a.smoke and not torch.cuda.is_available() else {})}
        with ClockLog() as clocks:
            r = subprocess.run([sys.executable, __file__, "--one", str(i), "--compile_mode", a.compile_mode] + (["--smoke"] if a.smoke else []),
                               capture_output=True, text=True, env=env)
        line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
        rec = per_mhz(json.loads(line[0][7:]), clocks) if line else {"name": spec[0], "error": (r.stderr or r.stdout)[-1500:]}
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        keep(rec); out.append(rec)
    return out


def ratios(res: dict) -> dict:
    "Ours over the Transformer at each length: this script's loop (TRAIN[0] / [4], [5] / [6]) and the command line."
    out, ok = {}, {r["name"]: r for r in res.get("train", []) if "tokens_per_s" in r}
    for seq, (o, t) in ((2048, (0, 4)), (8192, (5, 6))):
        if TRAIN[o][0] in ok and TRAIN[t][0] in ok:
            out[f"ratio_ours_over_transformer_T{seq}"] = round(ok[TRAIN[o][0]]["tokens_per_s"] / ok[TRAIN[t][0]]["tokens_per_s"], 3)
    by_seq = {r["seq"]: r for r in res.get("cli", []) if "tokens_per_s" in r}
    tf = {r["seq"]: r for r in ok.values() if r.get("model") == "transformer"}
    for seq in sorted(by_seq.keys() & tf.keys()):
        out[f"ratio_cli_over_transformer_T{seq}"] = round(by_seq[seq]["tokens_per_s"] / tf[seq]["tokens_per_s"], 3)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="train,decode,profile")
    p.add_argument("--only", help="train configurations whose name contains this")
    p.add_argument("--idx", help="train configurations by index, e.g. 0,1,4")
    p.add_argument("--smoke", action="store_true"); p.add_argument("--out")
    p.add_argument("--compile_mode", default="default", help="torch.compile mode of the training configurations")
    p.add_argument("--cli_steps", type=int, default=36, help="training steps of each command-line run (section cli)")
    p.add_argument("--cli_min", type=float, help="end the whole run after a command-line run below this many tokens/s "
                   "(a card too slow for the goal: the rest is not worth its device time)")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    sys.path.insert(0, HERE)
    if a.one is not None:
        print("RESULT " + json.dumps(train_one(TRAIN[a.one], a.smoke, a.compile_mode))); return
    from common import emit
    global PARTIAL
    PARTIAL = a.out and a.out + ".partial.jsonl"
    res, secs = {}, a.sections.split(",")
    unknown = [s for s in secs if s not in ("train", "cli", "decode", "profile")]
    if unknown: p.error(f"--sections: unknown {', '.join(unknown)} (train, cli, decode, profile)")
    for sec in secs:                      # in the order given: `cli,train` runs the command line on a card not yet warmed
        if sec == "train": res["train"] = train_section(a)
        elif sec == "cli" and not a.smoke:
            res["cli"] = cli(a.cli_steps, a.cli_min)
            if any("stopped" in r for r in res["cli"]): break
        elif sec == "decode": res["decode"] = decode(a.smoke); keep(res["decode"])
        elif sec == "profile": res["profile"] = profile(a.smoke)
    res.update(ratios(res))
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    emit(res, device=dev, out=a.out, benchmark="issue10_speed", goals={"train_tokens_per_s": 185_000, "decode_ms_per_token_batch1": 1.0})


if __name__ == "__main__":
    main()
