"""Issue 10 item 5: batch-1 decode of the 434M Lite model with chapter 04a's `Decoder`, three ways, each compiled and
captured in one CUDA graph per token:
- matvec: the `Decoder` as shipped; at batch 1 it steps with `model_step_matvec` (every product a reduction Inductor
  fuses with its neighbours: 5 kernels per layer in Inductor's code), at larger batches with `model_step_fused`;
- gemm: `model_step_fused` at every batch (fused weights: w1+w3 as one GEMM, the head mixer folded into out_proj, the
  state (B, H, D, N): 8 kernels per layer);
- previous: the `Decoder` before this work (`model_step_real`: 11 kernels per layer). Prints one JSON record
(benchmarks/common.py) and writes it to --out (also after every phase, so a run cut short keeps what it measured).

    python benchmarks/bench_decode_fused.py --out benchmarks/results/decode_fused_h200.json
    # or in two runs of under 10 minutes (7 compiles of the 28-layer step in one):
    python benchmarks/bench_decode_fused.py --cases 1x128,1x2048,1x8192 --out benchmarks/results/decode_fused_h200.json
    python benchmarks/bench_decode_fused.py --no-checks --paths gemm,previous --cases 64x128,64x2048 \
        --out benchmarks/results/decode_fused_h200_batch64.json
    python benchmarks/bench_decode_fused.py --smoke      # CPU: tiny model, every code path once (matvec compiled by Inductor for the CPU)
    python benchmarks/bench_decode_fused.py --paths matvec --cases 1x128 --no-checks --inductor coordinate_descent_tuning=True

What it records:
- checks_fp32: the new paths' greedy tokens (batch 1, 128-token prompt, 32 new) against chapter 04's `generate` (must be
  identical; bench_speed.py checked the previous path's), and their max logit differences from chapter 04's eager step
  over 32 teacher-forced steps;
- checks_bf16: the same model in bf16 (A kept fp32): max logit differences between the paths and chapter 04's eager step
  over 32 teacher-forced steps, and whether the greedy tokens agree;
- decode: ms per token after 128 / 2,048 / 8,192-token prompts at batch 1 and 128 / 2,048 at batch 64, per path:
  `ms_per_token` is a loop of `step` + GPU argmax (what `generate` does per token), `replay_ms` the bare graph replay;
- profile: the kernels one step launches (the compiled function run outside the graph: the same kernels the graph
  holds), their count and GPU time, by category.
"""
import argparse, ast, json, os, sys, time
from pathlib import Path

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [(1, 128), (1, 2048), (1, 8192), (64, 128), (64, 2048)]
FLOOR_MS = 2 * 433_662_848 / 4.8e12 * 1e3          # streaming the bf16 weights once at 4.8 TB/s


def decoder_class(path):
    """The `Decoder` for a path: as shipped (matvec: `model_step_matvec` when compiled at batch 1), with the GEMM step at
    every batch (gemm: `model_step_fused`), or as it was before this work (previous: `model_step_real`, six GEMMs a layer,
    states (B, H, N, D))."""
    from mamba3_lite.decode import Decoder, model_step_fused, model_step_real
    if path == "matvec": return Decoder

    class GemmDecoder(Decoder):
        matvec_max_batch = 0
    if path == "gemm": return GemmDecoder

    class PreviousDecoder(GemmDecoder):
        def __init__(self, model, batch_size, **kw):
            super().__init__(model, batch_size, **kw)                  # the fused weights are built, then not used
            compiled = self._fn is not model_step_fused
            self._fn = torch.compile(model_step_real, dynamic=False) if compiled else model_step_real
            self.states = [(r.transpose(-1, -2).contiguous(), i.transpose(-1, -2).contiguous()) for r, i in self.states]

        @torch.inference_mode()
        def prefill(self, idx):
            logits, state = self.model(idx, return_state=True)
            for (r, i), s in zip(self.states, state): r.copy_(s.real); i.copy_(s.imag)
            return logits[:, -1]

        @torch.inference_mode()
        def _run(self):
            self.logits.copy_(self._fn(self.model, self.token, self.states))
    return PreviousDecoder


def make(path, model, batch, smoke=False):
    # a CPU smoke run compiles only the matvec path (which exists only compiled), with Inductor's CPU code
    kw = {"compile": True} if smoke and path == "matvec" and batch == 1 else {}
    return decoder_class(path)(model, batch, **kw)


def build(smoke, dev):
    from mamba3_lite.model import Mamba3Transformer, ModelConfig
    size = dict(d_model=64, n_layers=2, n_heads=4, head_dim=16, state_dim=8, ffn_dim=128) if smoke else {}
    torch.manual_seed(0)
    model = Mamba3Transformer(ModelConfig(max_seq_len=8192, pad_vocab_multiple=64, **size)).to(dev).eval()
    with torch.no_grad():                       # trained mixers are not the identity: do not test the fold on one
        for b in model.layers: b.mimo.mix.weight.add_(0.02 * torch.randn_like(b.mimo.mix.weight))
    return model


def to_bf16(model):
    model.to(torch.bfloat16)
    for b in model.layers: b.A_log.data, b.A_imag.data = b.A_log.data.float(), b.A_imag.data.float()
    torch._dynamo.reset()                       # parameters' dtypes are not guarded: compile the steps afresh
    return model


@torch.inference_mode()
def teacher_forced(dec, prompt, tokens):
    "Logits (n, B, V) of prefill then one step per token of `tokens` (n, B)."
    out = [dec.prefill(prompt).clone()]
    for t in tokens[:-1]: out.append(dec.step(t).clone())
    return torch.stack(out)


@torch.inference_mode()
def eager_forced(model, prompt, tokens):
    "The same with chapter 04's forward + complex `step` (what `generate` runs)."
    logits, state = model(prompt, return_state=True)
    out = [logits[:, -1]]
    for t in tokens[:-1]:
        l, state = model.step(t, state); out.append(l)
    return torch.stack(out)


def checks(model, dev, smoke, paths):
    from common import sync
    n_new, ctx = (8, 16) if smoke else (32, 128)
    prompt = torch.randint(0, 50257, (1, ctx), device=dev)
    ref = model.generate(prompt, n_new, temperature=0)
    rec, decs, gen = {"batch": 1, "context": ctx, "new_tokens": n_new}, {}, {}
    for p in paths:
        t0 = time.perf_counter(); decs[p] = make(p, model, 1, smoke); gen[p] = decs[p].generate(prompt, n_new, temperature=0)
        rec[f"same_tokens_{p}_vs_generate"] = bool(torch.equal(gen[p], ref))
        sync(dev); rec[f"{p}_warmup_s"] = round(time.perf_counter() - t0, 1)
    for a, b in (("matvec", "gemm"), ("matvec", "previous"), ("gemm", "previous")):
        if a in gen and b in gen: rec[f"same_tokens_{a}_vs_{b}"] = bool(torch.equal(gen[a], gen[b]))
    toks = ref[:, ctx:].T                                            # (n, 1): generate's greedy tokens
    logits = {p: teacher_forced(d, prompt, toks) for p, d in decs.items()}
    logits["eager"] = eager_forced(model, prompt, toks)
    rec["logit_scale"] = round(logits["eager"].abs().max().item(), 4)
    for a, b in (("matvec", "gemm"), ("matvec", "previous"), ("gemm", "previous"), ("matvec", "eager"), ("gemm", "eager"),
                 ("previous", "eager")):
        if a in logits and b in logits:
            rec[f"max_logit_diff_{a}_vs_{b}"] = float(f"{(logits[a] - logits[b]).abs().max().item():.4g}")
    return rec, prompt, ref                                          # (the compiled steps stay cached for the timings)


def time_case(dec, batch, ctx, n_new, dev):
    from common import sync
    prompt = torch.randint(0, 50257, (batch, ctx), device=dev)
    t0 = time.perf_counter(); dec.generate(prompt, 8, temperature=0); sync(dev); warm = time.perf_counter() - t0
    per_tok = []
    for _ in range(3):                                               # median of 3 decodes of n_new tokens
        logits = dec.prefill(prompt); sync(dev)
        t0 = time.perf_counter()
        for _ in range(n_new): logits = dec.step(logits.argmax(-1))
        sync(dev); per_tok.append((time.perf_counter() - t0) / n_new)
    rec = {"batch": batch, "context": ctx, "new_tokens": n_new, "ms_per_token": round(1000 * sorted(per_tok)[1], 3),
           "tokens_per_s_per_sequence": round(1 / sorted(per_tok)[1]), "warmup_s": round(warm, 1)}
    if dec.graph is not None:
        sync(dev); t0 = time.perf_counter()
        for _ in range(200): dec.graph.replay()
        sync(dev); rec["replay_ms"] = round((time.perf_counter() - t0) / 200 * 1000, 3)
    return rec


def profile_step(dec, dev):
    "Kernels of one step: the compiled function called directly (outside the graph), 10 times."
    if dev.type != "cuda": return {"skipped": "no CUDA"}
    from torch.profiler import ProfilerActivity, profile
    for _ in range(2): dec._run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(10): dec._run()
        torch.cuda.synchronize()
    rows = sorted(((e.key, e.device_time_total / 10 / 1000, e.count / 10) for e in p.key_averages() if e.device_time_total > 0),
                  key=lambda r: -r[1])
    cat = {}
    for k, ms, n in rows:
        c = ("gemm" if any(s in k.lower() for s in ("gemm", "gemv", "cutlass", "sm90", "nvjet", "cublas", "splitk")) else
             "inductor" if k.startswith("triton_") else "copy/memset" if any(s in k.lower() for s in ("copy", "memset", "memcpy")) else "other")
        n0, ms0 = cat.get(c, (0, 0.0)); cat[c] = (n0 + n, ms0 + ms)
    return {"kernels_per_step": round(sum(r[2] for r in rows), 1), "gpu_ms_per_step": round(sum(r[1] for r in rows), 4),
            "by_category": {c: {"kernels": round(n, 1), "ms": round(ms, 4)} for c, (n, ms) in cat.items()},
            "top_kernels": [{"kernel": k[:110], "ms_per_step": round(ms, 4), "calls_per_step": n} for k, ms, n in rows[:25]]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paths", default="matvec,gemm,previous", help="which decoders: matvec (as shipped), gemm, previous")
    p.add_argument("--cases", help="BxT,... (default: 1x128,1x2048,1x8192,64x128,64x2048)")
    p.add_argument("--inductor", default="", help="torch._inductor.config settings, e.g. coordinate_descent_tuning=True")
    p.add_argument("--no-checks", action="store_true"); p.add_argument("--smoke", action="store_true"); p.add_argument("--out")
    a = p.parse_args()
    sys.path.insert(0, HERE)
    from common import emit
    import torch._inductor.config as ic
    settings = dict(kv.split("=", 1) for kv in a.inductor.split(",") if kv)
    for k, v in settings.items(): setattr(ic, k, ast.literal_eval(v))
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    paths = a.paths.split(",")
    cases = [tuple(map(int, c.split("x"))) for c in a.cases.split(",")] if a.cases else CASES
    if a.smoke: cases = [(b, 16) for b in sorted({b for b, _ in cases})]
    res = {"paths": paths, "inductor": settings}
    extra = dict(benchmark="issue10_decode_fused", goals={"decode_ms_per_token_batch1": 1.0}, floor_ms=round(FLOOR_MS, 3))
    def save():                                                          # a partial record after every phase
        if a.out: Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps({"partial": True, **extra, "results": res}, indent=1))
    log = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)
    model = build(a.smoke, dev)
    if not a.no_checks:
        log("fp32 checks"); res["checks_fp32"] = checks(model, dev, a.smoke, [p for p in paths if p != "previous"])[0]; save()
    if dev.type == "cuda" or a.smoke:
        model = to_bf16(model)
        if not a.no_checks:
            log("bf16 checks"); res["checks_bf16"] = checks(model, dev, a.smoke, paths)[0]; save()
    res["decode"], decs = [], {}
    from mamba3_lite.decode import Decoder
    for batch, ctx in cases:
        for path in paths:
            if path == "matvec" and batch > Decoder.matvec_max_batch and "gemm" in paths: continue   # the same decoder as gemm
            log(f"decode {path} batch {batch} context {ctx}")
            t0 = time.perf_counter()
            if (path, batch) not in decs: decs[(path, batch)] = make(path, model, batch, a.smoke)
            dec = decs[(path, batch)]
            rec = {"path": path, "step": dec._fn.__name__ if hasattr(dec._fn, "__name__") else str(dec._fn),
                   **time_case(dec, batch, ctx, 16 if a.smoke else 64, dev), "wall_s": round(time.perf_counter() - t0, 1)}
            res["decode"].append(rec); print(json.dumps(rec), flush=True); save()
    by = {(r["path"], r["batch"], r["context"]): r["ms_per_token"] for r in res["decode"]}
    res["speedup_over_previous"] = {f"{pth} {b}x{t}": round(by[("previous", b, t)] / ms, 3)
                                    for (pth, b, t), ms in by.items() if pth != "previous" and ("previous", b, t) in by}
    res["profile"] = {}
    for path in paths:                                               # the batch-1 decoders timed above (no new compiles)
        if (path, 1) not in decs: continue
        log(f"profile {path}")
        res["profile"][path] = profile_step(decs[(path, 1)], dev); save()
    emit(res, device=dev, out=a.out, **extra)


if __name__ == "__main__":
    main()
