"""The paper's Mamba-3 SISO scan on one GPU: parity against the float64 oracle, then speed, for both of our forms —
chapter 09c's chunked PyTorch `mamba3_siso_chunked` and chapter 09f's `mamba3_siso_triton` (our Triton scan kernels
with reweighted keys) — eager and under torch.compile. Prints one JSON record (benchmarks/common.py's format).

    ENABLE_TRITON_KERNELS=1 python benchmarks/bench_mamba3_siso.py --out benchmarks/results/mamba3_siso_h200.json
    TRITON_INTERPRET=1 python benchmarks/bench_mamba3_siso.py --smoke        # tiny shapes on a CPU: checks the script

Parity: fp32 and bf16 (q, k, v, z in bf16) inputs on the device against `mamba3_siso_naive` in float64 on the same
values — outputs and the gradients of every input, max |diff| / max |reference| — on a small problem with a carried
state, and on a long one (T=2048) with extreme decays. Speed: the official layer's shape B=8, T=2048, H=16, N=128,
P=64, R=32 (half of the 64 pairs rotated: rope_fraction 0.5), q, k, v, z in bf16, the rest fp32;
fwd (no grad) and fwd+bwd (sum of y), median of `--iters` synchronised calls. The official `mamba3_siso_combined`
(Triton) at that shape is quoted as a peer figure, not measured here.
"""
import argparse, math

import torch
import torch.nn.functional as F

from common import emit, peak_memory_gib, time_fn                                 # benchmarks/common.py
from mamba3_lite.mamba3.siso import mamba3_siso_chunked, mamba3_siso_naive

PEER = {"official mamba3_siso_combined (Triton), fwd / fwd+bwd ms, measured on an H200, 2026-12-01, "
        "not by this repository's scripts": [0.716, 2.511]}
LOW = ("q", "k", "v", "z")                                                         # the bf16 inputs in the speed runs


def problem(Bsz, T, H, N, P, R, extreme=False, seed=0):
    "fp64 CPU inputs like the layer makes them: RMS-normed q, k with bias 1, Δ log-uniform in [1e-3, 1e-1]."
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    dt = torch.exp(math.log(1e-3) + torch.rand(Bsz, T, H, generator=g, dtype=torch.float64) * math.log(100))
    A = -F.softplus(r(Bsz, T, H)).clamp(min=1e-4)
    adt = -torch.exp(math.log(50) + torch.rand(Bsz, T, H, generator=g, dtype=torch.float64) * math.log(80)) if extreme else A * dt
    return dict(q=F.rms_norm(r(Bsz, T, H, N), (N,)), k=F.rms_norm(r(Bsz, T, H, N), (N,)), v=r(Bsz, T, H, P), adt=adt,
                dt=dt, trap=r(Bsz, T, H), angles=r(Bsz, T, H, R), D=r(H), z=r(Bsz, T, H, P),
                q_bias=torch.ones(H, N, dtype=torch.float64), k_bias=torch.ones(H, N, dtype=torch.float64))


def on(p, dev, low=None):
    "The problem on `dev` in fp32, with the LOW inputs in `low` if given."
    return {k: v.to(dev, (low if low is not None and k in LOW else torch.float32)) for k, v in p.items()}


def rel(a, b):
    return ((a.double().cpu() - b).abs().max() / b.abs().max().clamp(min=1e-300)).item()


def parity(fn, p, dev, low, Q):
    "Max relative differences of y and of every input's gradient, fn on the device vs the fp64 oracle."
    leaves = {k: v.detach().requires_grad_() for k, v in on(p, dev, low).items()}
    y = fn(**leaves, chunk_size=Q)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (y.float() * g.to(dev, torch.float32)).sum().backward()
    ref = {k: v.detach().requires_grad_() for k, v in p.items()}
    y_ref = mamba3_siso_naive(**{k: (v.to(low).double() if low is not None and k in LOW else v) for k, v in ref.items()})
    (y_ref * g).sum().backward()
    out = {"y": rel(y, y_ref.detach())}
    out.update({f"d{k}": rel(leaves[k].grad, ref[k].grad) for k in p})
    # with extreme decays some true gradients are ~e^-50: their own-scale ratio measures only rounding, so also the
    # worst absolute gradient error against the largest gradient of the case
    largest = max(ref[k].grad.abs().max().item() for k in p)
    out["grads_vs_largest"] = max((leaves[k].grad.double().cpu() - ref[k].grad).abs().max().item() for k in p) / largest
    return out


def speed(fn, p, dev, iters):
    "Median ms of fwd (no grad) and fwd+bwd, and peak GiB of fwd+bwd."
    leaves = {k: v.detach().requires_grad_(v.is_floating_point()) for k, v in on(p, dev, torch.bfloat16).items()}
    def fwd():
        with torch.no_grad(): fn(**leaves)
    grad_of = [v for v in leaves.values() if v.requires_grad]
    def fwd_bwd(): torch.autograd.grad(fn(**leaves).float().sum(), grad_of)   # no .grad accumulation to time
    f = time_fn(fwd, dev, warmup=3, iters=iters)["median_s"]
    if dev.type == "cuda": torch.cuda.reset_peak_memory_stats()
    fb = time_fn(fwd_bwd, dev, warmup=3, iters=iters)["median_s"]
    return {"fwd_ms": round(1e3 * f, 3), "fwd_bwd_ms": round(1e3 * fb, 3), "peak_gib": peak_memory_gib(dev)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true"); ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out"); ap.add_argument("--no-pytorch", action="store_true", help="skip the PyTorch form")
    ap.add_argument("--profile", action="store_true", help="also a torch.profiler table of the compiled Triton form")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    from mamba3_lite.mamba3.siso_triton import mamba3_siso_triton
    forms = {"triton": mamba3_siso_triton} if a.no_pytorch else {"pytorch": mamba3_siso_chunked, "triton": mamba3_siso_triton}
    small = problem(2, 300, 4, 32, 16, 8)
    long = problem(1, 130 if a.smoke else 2048, 2, 32, 16, 8, extreme=True, seed=3)
    res = {"parity": {}, "speed": {}, "peers": PEER}
    for name, fn in forms.items():
        res["parity"][name] = {}
        for case, prob, low in (("small fp32", small, None), ("small bf16", small, torch.bfloat16), ("long extreme fp32", long, None)):
            try: res["parity"][name][case] = parity(fn, prob, dev, low, 64)
            except (ValueError, RuntimeError) as e: res["parity"][name][case] = {"error": str(e)[:300]}
    shape = (1, 128, 2, 32, 16, 8) if a.smoke else (8, 2048, 16, 128, 64, 32)
    big = problem(*shape)
    res["speed_shape"] = dict(zip(("B", "T", "H", "N", "P", "R"), shape))
    for name, fn in forms.items():
        for mode in ("eager", "compiled"):
            torch._dynamo.reset()
            f = torch.compile(fn) if mode == "compiled" and not a.smoke else fn
            try: res["speed"][f"{name} {mode}"] = speed(f, big, dev, 3 if a.smoke else a.iters)
            except Exception as e: res["speed"][f"{name} {mode}"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    if a.profile and dev.type == "cuda":
        res["profile"] = profile(torch.compile(forms["triton"]), big, dev)
    emit(res, device=dev, out=a.out, benchmark="mamba3_siso_scan")


def profile(fn, p, dev, iters=5, top=25):
    "GPU time per fwd+bwd call of the compiled Triton form, by kernel (torch.profiler), the largest first."
    from torch.profiler import ProfilerActivity, profile as prof
    leaves = {k: v.detach().requires_grad_(v.is_floating_point()) for k, v in on(p, dev, torch.bfloat16).items()}
    grad_of = [v for v in leaves.values() if v.requires_grad]
    for _ in range(3): torch.autograd.grad(fn(**leaves).float().sum(), grad_of)
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as pr:
        for _ in range(iters): torch.autograd.grad(fn(**leaves).float().sum(), grad_of)
        torch.cuda.synchronize()
    ev = [e for e in pr.key_averages() if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
    ev.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in ev) / iters
    return {"device_us_per_call": round(total, 1),
            "kernels": [{"name": e.key[:120], "us_per_call": round(e.self_device_time_total / iters, 1),
                         "calls_per_call": e.count / iters} for e in ev[:top]]}


if __name__ == "__main__":
    main()
