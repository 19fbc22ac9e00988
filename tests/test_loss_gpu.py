"""Chapter 03b's chunked linear + cross-entropy on a GPU (the path `add_product`'s cuBLAS `out_dtype` GEMM takes),
against `F.cross_entropy` on the full fp32 logits. CPU runs skip: the notebook checks the CPU path."""
import pytest
import torch
import torch.nn.functional as F

from mamba3_lite.loss import add_product, linear_cross_entropy
from mamba3_lite.testing import assert_close

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@gpu
def test_add_product_sums_bf16_products_in_fp32():
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(s, device="cuda", generator=g).bfloat16() for s in ((512, 1000), (1000, 256)))
    acc = torch.randn(512, 256, device="cuda", generator=g)
    want = acc.double() + a.double() @ b.double()
    got = add_product(acc.clone(), a, b)
    assert got.dtype == torch.float32
    assert_close(got, want.float(), rtol=1e-5, atol=1e-4, name="fp32 sum of a bf16 product")


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_linear_cross_entropy_matches_full_logits_on_gpu(dtype):
    torch.manual_seed(0)
    M, d, V, Vp = 9000, 256, 50257, 50304                                   # 3 chunks of 4096, the last one short
    h = torch.randn(M, d, device="cuda", requires_grad=True)
    W = (0.05 * torch.randn(Vp, d, device="cuda")).requires_grad_()
    t = torch.randint(0, V, (M,), device="cuda"); t[:100] = -100
    hc, Wc = h.to(dtype), W.to(dtype)                                        # the operands both sides multiply
    ref = F.cross_entropy((hc.float() @ Wc.float().t())[:, :V], t)
    ref_g = torch.autograd.grad(ref, (h, W))
    out = linear_cross_entropy(hc, Wc, t, V)
    out_g = torch.autograd.grad(out, (h, W))
    tol = 1e-5 if dtype == torch.float32 else 2e-2                          # bf16: the gradient's operands round
    assert_close(out, ref, rtol=1e-5 if dtype == torch.float32 else 1e-3, name=f"loss {dtype}")
    for name, a, b in (("dh", out_g[0], ref_g[0]), ("dW", out_g[1], ref_g[1])):
        assert_close(a, b, rtol=tol, atol=1e-6, name=f"{name} {dtype}")
    assert out_g[1][V:].abs().max() == 0                                    # padded rows get no gradient
