"""Experiment: why the compiled PyTorch SSD path halved its speed when its cumulative log-decay moved to float64.

The h200-preset model (d 1024, B=16, T=2048, bf16 autocast, fused CE, compiled) cut to `--layers` layers (compiling
28 takes minutes), PyTorch SSD path, four forms of the decays, each in its own process (`--forms` picks):

- `fp32`: the path before 2026-12-05 (alpha summed in float32; 2.2e-4 error after reset-like steps, chapter 02);
- `fp64`: the path of 2026-12-05 00:44 (fp64 steps and sum, alpha carried in fp64 into every use, the (Q,Q)
  differences taken in fp64 and cast);
- `package`: the package now (fp32 steps summed in fp64, split at once into a float32 hi + lo pair by an opaque
  custom op, so that no kernel after the sum reads fp64);
- `segsum`: fp32 only, every decay the sum of exactly the steps it spans (`_exp_segsum` for the (Q,Q) block, an
  exclusive reverse cumsum for the chunk-end decays): no difference of two large sums anywhere.

Each prints ms per step (median of 10 after 3 warm-up steps) and its 12 costliest GPU kernels over 2 profiled steps.

    python benchmarks/exp_pytorch_alpha.py --layers 4 --out benchmarks/results/pytorch_alpha_h200.json
"""
import argparse, json, math, subprocess, sys, time

import torch
import torch.nn.functional as F

FORMS = ("fp32", "package", "segsum", "fp64")


def install(form: str):
    "Patch chapter 02's real path to the decay form `form` (the package as it is for 'package')."
    from mamba3_lite.ssd import chunk as c
    if form == "package": return
    if form == "fp32":
        orig = c.chunk_log_decays_and_phases
        c.chunk_log_decays_and_phases = lambda dt, A_re, A_im, Q, alpha_dtype=None: orig(dt, A_re, A_im, Q)
        return
    if form == "segsum":                 # fp32 only: every decay a sum of the steps it spans (no difference of sums)
        orig, side = c.chunk_log_decays_and_phases, {}
        def decays(dt, A_re, A_im, Q, alpha_dtype=None):
            Bsz, T, H = dt.shape
            pad = (-T) % Q; nc = (T + pad) // Q
            side["a"] = c._pad_time(F.softplus(dt.float()) * A_re.float(), pad).reshape(Bsz, nc, Q, H)
            return orig(dt, A_re, A_im, Q)
        def core(q, k, xc, alpha, S0=None):
            a = side.pop("a")                                                       # (B, c, Q, H) fp32 steps
            Bsz, nc, Q, H, N2 = q.shape
            D = xc.shape[-1]
            L = c._exp_segsum(a.permute(0, 1, 3, 2))                                # (B, c, H, Q, Q)
            scores = torch.einsum("bcihm,bcjhm->bchij", q, k) * L
            y = torch.einsum("bchij,bcjhd->bcihd", scores, xc)
            to_end = F.pad(a[:, :, 1:].flip(2).cumsum(2).flip(2), (0, 0, 0, 1))    # sum over m > j, (B, c, Q, H)
            states = torch.einsum("bcjhm,bcjhd->bchmd", k * to_end.exp()[..., None], xc)
            if S0 is None: S0 = torch.zeros(Bsz, H, N2, D, dtype=states.dtype, device=states.device)
            states = torch.cat([S0[:, None].to(states.dtype), states], dim=1)
            decay_chunk = c._exp_segsum(F.pad(alpha[:, :, -1], (0, 0, 1, 0)).transpose(1, 2))
            states = torch.einsum("bhzc,bchmd->bzhmd", decay_chunk, states)
            y = y + torch.einsum("bcihm,bchmd->bcihd", q * alpha.exp()[..., None], states[:, :-1])
            return y, states[:, -1]
        c.chunk_log_decays_and_phases = decays
        c.ssd_real_chunkwise.__defaults__ = c.ssd_real_chunkwise.__defaults__[:-1] + (core,)
        return
    # fp64: as on 2026-12-05 before the pair: fp64 steps and sum, alpha carried in fp64 into every use
    orig = c.chunk_log_decays_and_phases
    def decays(dt, A_re, A_im, Q, alpha_dtype=None):
        Bsz, T, H = dt.shape
        pad = (-T) % Q; nc = (T + pad) // Q
        a = c._pad_time(F.softplus(dt.double()) * A_re.double(), pad).reshape(Bsz, nc, Q, H)
        _, theta, theta_end = orig(dt, A_re, A_im, Q)
        return torch.cumsum(a, dim=2), theta, theta_end
    def core(q, k, xc, alpha, S0=None):
        Bsz, nc, Q, H, N2 = q.shape
        D = xc.shape[-1]
        causal = torch.tril(torch.ones(Q, Q, dtype=torch.bool, device=q.device))
        ap = alpha.permute(0, 1, 3, 2)
        L = (ap[..., :, None] - ap[..., None, :]).to(q.dtype).masked_fill(~causal, -math.inf).exp()
        scores = torch.einsum("bcihm,bcjhm->bchij", q, k) * L
        y = torch.einsum("bchij,bcjhd->bcihd", scores, xc)
        decay_states = (alpha[:, :, -1:] - alpha).to(q.dtype).exp()
        states = torch.einsum("bcjhm,bcjhd->bchmd", k * decay_states[..., None], xc)
        if S0 is None: S0 = torch.zeros(Bsz, H, N2, D, dtype=states.dtype, device=states.device)
        states = torch.cat([S0[:, None].to(states.dtype), states], dim=1)
        decay_chunk = c._exp_segsum(F.pad(alpha[:, :, -1], (0, 0, 1, 0)).transpose(1, 2)).to(states.dtype)
        states = torch.einsum("bhzc,bchmd->bzhmd", decay_chunk, states)
        y = y + torch.einsum("bcihm,bchmd->bcihd", q * alpha.exp().to(q.dtype)[..., None], states[:, :-1])
        return y, states[:, -1]
    c.chunk_log_decays_and_phases = decays
    c.ssd_real_chunkwise.__defaults__ = c.ssd_real_chunkwise.__defaults__[:-1] + (core,)


def one(form: str, layers: int) -> dict:
    install(form)
    from mamba3_lite.model import ModelConfig, Mamba3Transformer
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=layers, pad_vocab_multiple=64, fused_cross_entropy=True, ssd_dispatch="pytorch")
    from common import compiled_train_step, kernel_rows
    step = compiled_train_step(Mamba3Transformer(cfg).cuda())
    t0 = time.perf_counter()
    for _ in range(3): step()
    torch.cuda.synchronize(); warm = time.perf_counter() - t0
    times = []
    for _ in range(10):
        t0 = time.perf_counter(); step(); torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(2): step()
        torch.cuda.synchronize()
    rows = kernel_rows(p, 2)
    return {"form": form, "layers": layers, "warmup_s": round(warm, 1), "step_ms": round(1000 * sorted(times)[5], 2),
            "gpu_ms_per_step": round(sum(r[1] for r in rows), 2), "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2),
            "top_kernels": [{"kernel": k[:110], "ms": round(ms, 3), "calls": n} for k, ms, n in rows[:12]]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4); p.add_argument("--out"); p.add_argument("--one")
    p.add_argument("--forms", default=",".join(FORMS), help=f"comma-separated, of {FORMS}")
    a = p.parse_args()
    if a.one: print("RESULT " + json.dumps(one(a.one, a.layers))); return
    if not torch.cuda.is_available(): sys.exit("exp_pytorch_alpha: needs a CUDA GPU")
    from common import emit
    res = []
    for form in a.forms.split(","):
        r = subprocess.run([sys.executable, __file__, "--one", form, "--layers", str(a.layers)], capture_output=True, text=True)
        line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
        res.append(json.loads(line[0][7:]) if line else {"form": form, "error": (r.stderr or r.stdout)[-1500:]})
        print(json.dumps(res[-1])[:400], flush=True)
    emit({"forms": res}, device="cuda", out=a.out, benchmark="pytorch_alpha_experiment")


if __name__ == "__main__":
    main()
