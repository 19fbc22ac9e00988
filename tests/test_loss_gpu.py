"""Chapter 03b's chunked linear + cross-entropy on a GPU (the path `add_product`'s cuBLAS `out_dtype` GEMM and
chapter 05f's Triton softmax pass take), against `F.cross_entropy` on the full fp32 logits, and the kernel alone against
`ce_chunk` at the training shape. CPU runs skip: the notebooks check the CPU path and the kernel on the interpreter."""
import pytest
import torch
import torch.nn.functional as F

from mamba3_lite.loss import add_product, ce_chunk, linear_cross_entropy
from mamba3_lite.loss_triton import ce_chunk_inplace
from mamba3_lite.testing import assert_close

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@gpu
def test_add_product_sums_bf16_products_in_fp32():
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(s, device="cuda", generator=g).bfloat16() for s in ((512, 1000), (1000, 256)))
    acc = torch.randn(512, 256, device="cuda", generator=g)
    want = acc.double() + a.double() @ b.double()
    into = acc.clone()
    got = add_product(into, a, b)
    assert got.dtype == torch.float32 and got.data_ptr() == into.data_ptr()          # summed in place: no copy of acc
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


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_softmax_kernel_matches_ce_chunk_at_the_training_shape(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    m, V, Vp = 4096, 50257, 50304
    logits = (3 * torch.randn(m, Vp, device="cuda", generator=g)).to(dtype)
    t = torch.randint(0, V, (m,), device="cuda", generator=g); t[:64] = -100; t[64] = V - 1
    ref_loss, ref_grad = ce_chunk(logits.double(), t, V)
    buf = logits.clone()
    loss, grad = ce_chunk_inplace(buf, t, V)
    assert grad.data_ptr() == buf.data_ptr()
    assert_close(loss, ref_loss, rtol=1e-6, name=f"loss sum {dtype}")
    assert_close(grad, ref_grad, atol=2**-7 if dtype == torch.bfloat16 else 1e-6, rtol=0, name=f"grad {dtype}")
    assert grad[:, V:].abs().max() == 0 and grad[:64].abs().max() == 0
