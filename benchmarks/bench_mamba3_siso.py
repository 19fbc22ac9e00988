"""GPU ask from H2a: parity + speed of mamba3_lite.mamba3.siso.mamba3_siso_chunked (pure PyTorch) on one GPU.
Copy into the repo (e.g. benchmarks/bench_mamba3_siso.py) and run:  python benchmarks/bench_mamba3_siso.py
  --smoke : tiny shapes on CPU (checks the script itself).
Prints: (1) fp32 chunked on CUDA vs fp64 naive oracle (CPU) on a small problem, outputs and gradients;
        (2) ms per fwd and fwd+bwd at the issue's shape B=8, T=2048, H=16, N=128, P=64 (R=32), eager and torch.compile.
The official mamba3_siso_combined (Triton) was measured at 0.716 ms fwd / 2.511 ms fwd+bwd at that shape (issue 11).
"""
import math, sys, time
import torch
import torch.nn.functional as F
from mamba3_lite.mamba3.siso import mamba3_siso_chunked, mamba3_siso_naive

smoke = "--smoke" in sys.argv
dev = "cpu" if smoke or not torch.cuda.is_available() else "cuda"


def problem(Bsz, T, H, N, P, R, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    dt = torch.exp(math.log(1e-3) + torch.rand(Bsz, T, H, generator=g) * math.log(100))
    A = -F.softplus(r(Bsz, T, H)).clamp(min=1e-4)
    p = dict(q=F.rms_norm(r(Bsz, T, H, N), (N,)), k=F.rms_norm(r(Bsz, T, H, N), (N,)), v=r(Bsz, T, H, P), adt=A * dt,
             dt=dt, trap=r(Bsz, T, H), angles=r(Bsz, T, H, R), D=r(H), z=r(Bsz, T, H, P),
             q_bias=torch.ones(H, N), k_bias=torch.ones(H, N))
    return {k: v.to(device=device, dtype=dtype) for k, v in p.items()}


# (1) parity on the device
p = problem(2, 300, 4, 32, 16, 8, "cpu")
leaves = {k: v.detach().clone().to(dev).requires_grad_() for k, v in p.items()}
y = mamba3_siso_chunked(**leaves)
g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
(y * g.to(dev)).sum().backward()
ref_leaves = {k: v.detach().double().requires_grad_() for k, v in p.items()}
y_ref = mamba3_siso_naive(**ref_leaves)
(y_ref * g.double()).sum().backward()
print(f"[{dev}] fp32 chunked vs fp64 naive: y rel {((y.double().cpu() - y_ref).abs().max() / y_ref.abs().max()).item():.2e}")
for k in p:
    a, b = leaves[k].grad.double().cpu(), ref_leaves[k].grad
    print(f"   d/d{k:7s} rel {((a - b).abs().max() / b.abs().max()).item():.2e}")

# (2) speed
shape = (1, 128, 2, 16, 8, 4) if smoke else (8, 2048, 16, 128, 64, 32)
p = problem(*shape, dev)


def bench(fn, fwd_only, n=3 if smoke else 20):
    leaves = {k: v.detach().clone().requires_grad_(not fwd_only) for k, v in p.items()}
    def once():
        y = fn(**leaves)
        if not fwd_only: y.sum().backward()
    for _ in range(2): once()
    if dev == "cuda": torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n): once()
    if dev == "cuda": torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


compiled = torch.compile(mamba3_siso_chunked)
for name, fn in (("eager", mamba3_siso_chunked), ("compiled", compiled)):
    with torch.no_grad():
        fwd = bench(fn, True)
    print(f"[{dev}] B,T,H,N,P,R={shape} {name:8s}: fwd {fwd:.3f} ms, fwd+bwd {bench(fn, False):.3f} ms")
if dev == "cuda": print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
