"""Chapter 05's Triton kernels (`mamba3_lite.ssd.triton`, notebooks 05a-05e; 05f's loss kernel's refusals) against the PyTorch reference.

* without triton (a subprocess that hides it): the modules import, the reference math runs, the kernels raise ImportError;
* on a CPU with TRITON_INTERPRET=1 (fp32/fp64, small shapes, run in CI): every kernel's forward and gradients equal the
  reference within 1e-4 relative; gradcheck through the scan's launchers and the per-chunk Function; non-zero gradients
  for every input; importing the kernels changes no other module; the model's entry point against the complex128
  oracle on mixed (reset-like, then ordinary) and extreme decays and T = chunk, through every backward path;
* with CUDA and triton (the H200): bf16 parity of outputs and gradients against the fp32 reference, and the oracle
  cases in fp32 (`TestGPU`).
"""
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:                                  # before the kernels are imported: @triton.jit reads it at decoration
    os.environ.setdefault("TRITON_INTERPRET", "1")

from mamba3_lite.ssd.chunk import per_chunk_ssd_pytorch, real_ssd_chunked, ssd_complex_chunkwise, ssd_real_chunkwise
from mamba3_lite.ssd.naive import ssd_naive_complex
from mamba3_lite.testing import assert_close
import mamba3_lite.ssd.triton.phases as phases

if phases.HAS_TRITON and not HAS_CUDA and not phases.INTERPRET:
    # the kernels were imported before TRITON_INTERPRET=1 was set. Reloading our modules does not help: Triton sets its
    # interpreter up when it is first imported, and every kernel then fails inside it ("Cannot call @triton.jit'd
    # outside of the scope of a kernel", triton 3.9). Refuse by name instead of failing test by test.
    raise RuntimeError("tests/test_triton.py: triton and the kernels were imported without TRITON_INTERPRET=1 on a "
                       "machine without CUDA; run pytest from the repository (tests/conftest.py sets it first) or export "
                       "TRITON_INTERPRET=1")
from mamba3_lite.ssd.triton import per_chunk, phases, real_ssd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_triton = pytest.mark.skipif(not phases.HAS_TRITON, reason="triton is not installed")
cpu_interp = pytest.mark.skipif(HAS_CUDA or not phases.HAS_TRITON, reason="CPU interpreter tests (no CUDA, triton present)")


def _flat(t):
    return torch.view_as_real(t) if t.is_complex() else t


def _grads(out, inputs, seed=1):
    "Gradients of a random linear functional of the (possibly complex) outputs."
    g = torch.Generator().manual_seed(seed)
    loss = 0
    for o in out:
        w = torch.randn(_flat(o).shape, generator=g, dtype=_flat(o).dtype).to(o.device)
        loss = loss + (_flat(o) * w).sum()
    return torch.autograd.grad(loss, inputs)


def _pc_inputs(Bsz=1, nc=2, Q=8, H=2, N=4, P=3, x_complex=False, cd=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    rd = torch.float64 if cd == torch.complex128 else torch.float32
    Bc = torch.randn(Bsz, nc, Q, H, N, dtype=cd, generator=g)
    Cc = torch.randn(Bsz, nc, Q, H, N, dtype=cd, generator=g)
    Xc = torch.randn(Bsz, nc, Q, H, P, dtype=cd if x_complex else rd, generator=g)
    dA = torch.complex(-0.5 * torch.rand(Bsz, nc, Q, H, generator=g, dtype=torch.float64),
                       torch.randn(Bsz, nc, Q, H, generator=g, dtype=torch.float64))
    A_log = dA.cumsum(2)                                               # complex128, as ssd_complex_chunkwise passes it
    decay = torch.exp(A_log[:, :, -1:] - A_log)
    return [t.requires_grad_() for t in (Bc, Cc, Xc, A_log, decay)]


def _real_inputs(Bsz=2, nc=3, Q=16, H=2, M=16, D=16, dtype=torch.float32, s0=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(Bsz, nc, Q, H, M, generator=g, dtype=dtype) for _ in range(2))
    x = torch.randn(Bsz, nc, Q, H, D, generator=g, dtype=dtype)
    alpha = (-0.3 * torch.rand(Bsz, nc, Q, H, generator=g, dtype=dtype)).cumsum(2)
    S0 = torch.randn(Bsz, H, M, D, generator=g, dtype=dtype) if s0 else None
    return [t.requires_grad_() if t is not None else None for t in (q, k, x, alpha, S0)]


def _ssd_inputs(Bsz=2, T=70, H=2, N=8, D=16, s0=True, im_scale=3.0, seed=0, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x, dt = torch.randn(Bsz, T, H, D, generator=g), torch.randn(Bsz, T, H, generator=g)
    A_re, A_im = -torch.rand(H, generator=g) - 0.1, im_scale * torch.randn(H, generator=g)
    BC = [torch.randn(Bsz, T, H, N, generator=g) for _ in range(4)]
    init = torch.randn(Bsz, H, N, D, dtype=torch.complex64, generator=g) if s0 else None
    ins = [t.to(device) for t in (x, A_re, A_im, *BC, dt)]
    ins = [t.to(dtype) if i not in (1, 2) else t for i, t in enumerate(ins)]          # A stays fp32 (a parameter)
    ins = [t.requires_grad_() for t in ins]
    return ins, (init.to(device).requires_grad_() if s0 else None)


class _ScanFunction(torch.autograd.Function):
    "Test harness: the scan's public launchers `scan_forward` / `scan_backward` as one differentiable function."
    @staticmethod
    def forward(ctx, q, k, x, alpha, S0, Q):
        ctx.save_for_backward(q, k, x, alpha, S0)
        ctx.Q = Q
        return real_ssd.scan_forward(q, k, x, alpha, S0, Q)

    @staticmethod
    def backward(ctx, dy, dS_fin):
        q, k, x, alpha, S0 = ctx.saved_tensors
        dq, dk, dx, dalpha, dS0, _ = real_ssd.scan_backward(q, k, x, alpha, S0, ctx.Q, dy, dS_fin)
        return dq, dk, dx, dalpha, dS0, None


def _scan_chunked(q, k, xc, alpha, S0=None):
    "`real_ssd_chunked`'s signature, (B,c,Q,H,.) tensors, on the Triton scan (state pass and chunked scan kernels)."
    Bsz, nc, Q, H, _ = q.shape
    flat = lambda t: t.reshape(Bsz, nc * Q, H, -1)
    y, S = _ScanFunction.apply(flat(q), flat(k), flat(xc), alpha.reshape(Bsz, nc * Q, H), S0, Q)
    return y.view(xc.shape), S


# ---------------------------------------------------------------------------------------------------- no triton
def test_without_triton_module_imports_and_raises():
    "Hide triton from a fresh interpreter: the module imports, HAS_TRITON is False, kernels raise ImportError."
    code = textwrap.dedent("""
        import sys; sys.modules["triton"] = None; sys.modules["triton.language"] = None   # import triton -> ImportError
        import torch
        from mamba3_lite.ssd.triton import per_chunk, phases, real_ssd
        from mamba3_lite.ssd.chunk import ssd_complex_chunkwise, ssd_real_chunkwise
        assert phases.HAS_TRITON is False
        Bsz, T, H, N, D = 1, 10, 2, 3, 4
        x, dt = torch.randn(Bsz, T, H, D), torch.randn(Bsz, T, H)
        A = torch.complex(-torch.rand(H) - 0.1, torch.randn(H))
        B_t, C_t = (torch.randn(Bsz, T, H, N, dtype=torch.complex64) for _ in range(2))
        y = ssd_complex_chunkwise(x, A, B_t, C_t, dt, chunk_size=4)                      # the reference still runs
        y2 = ssd_real_chunkwise(x, A.real, A.imag, B_t.real, B_t.imag, C_t.real, C_t.imag, dt, chunk_size=4)
        assert y.shape == y2.shape == (Bsz, T, H, D) and (y - y2).abs().max() < 1e-4
        for call in (lambda: ssd_complex_chunkwise(x, A, B_t, C_t, dt, chunk_size=4, per_chunk=per_chunk.per_chunk_ssd_triton),
                     lambda: real_ssd.ssd_real_chunkwise_triton(x, A.real, A.imag, B_t.real, B_t.imag, C_t.real, C_t.imag, dt)):
            try:
                call(); raise SystemExit("no ImportError")
            except ImportError as e:
                assert "triton" in str(e) and 'ssd_dispatch="pytorch"' in str(e), e
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


@needs_triton
def test_cpu_tensors_without_interpreter_raise():
    "Compiled kernels on CPU tensors: a clear RuntimeError, never a silent fallback."
    code = textwrap.dedent("""
        import os; os.environ.pop("TRITON_INTERPRET", None)
        import torch
        from mamba3_lite.ssd.triton import real_ssd
        x = torch.randn(1, 8, 2, 4); r = torch.randn(1, 8, 2, 3)
        try:
            real_ssd.ssd_real_chunkwise_triton(x, -torch.ones(2), torch.ones(2), r, r, r, r, torch.randn(1, 8, 2), chunk_size=4)
            raise SystemExit("no error")
        except RuntimeError as e:
            assert "CUDA" in str(e) and "TRITON_INTERPRET" in str(e), e
        print("OK")
    """)
    if HAS_CUDA:
        pytest.skip("CUDA present")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**env, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_block_dims_raise_value_error():
    with pytest.raises(ValueError, match='ssd_dispatch="pytorch"'):
        phases.check_block_dims(chunk_size=512, state_2N=128)
    phases.check_block_dims(chunk_size=256, state_2N=256, head_dim=64)               # the limit itself is fine
    if phases.HAS_TRITON:
        ins, _ = _ssd_inputs(Bsz=1, T=8, H=1, N=129, D=4, s0=False)
        with pytest.raises(ValueError, match="state_2N=258"):
            real_ssd.ssd_real_chunkwise_triton(*ins, chunk_size=4)


def test_import_has_no_side_effects():
    "Importing the kernel modules writes nothing into chapter 02's module (no registry: a caller passes the kernel)."
    code = textwrap.dedent("""
        import mamba3_lite.ssd.chunk as chunk
        before = dict(vars(chunk)); defaults = chunk.ssd_complex_chunkwise.__defaults__
        from mamba3_lite.ssd.triton import per_chunk, real_ssd
        assert dict(vars(chunk)) == before and chunk.ssd_complex_chunkwise.__defaults__ == defaults
        assert not hasattr(chunk, "PER_CHUNK_KERNELS")
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_split_complex_contiguous():
    z = torch.randn(3, 5, dtype=torch.complex64)
    re, im = per_chunk.split_complex(z)
    assert re.is_contiguous() and im.is_contiguous() and re.stride() == (5, 1)
    assert torch.equal(re, z.real) and torch.equal(im, z.imag)
    assert torch.view_as_real(z)[..., 0].stride() == (10, 2)                          # what a kernel must not be given
    re, im = per_chunk.split_complex(z.conj())                                               # a lazily conjugated view
    assert torch.equal(im, -z.imag)


# ---------------------------------------------------------------------------------------------------- CPU interpreter
@cpu_interp
@pytest.mark.parametrize("x_complex", [False, True])
def test_per_chunk_matches_pytorch(x_complex):
    ins = _pc_inputs(x_complex=x_complex)
    out, ref = per_chunk.per_chunk_ssd_triton(*ins), per_chunk_ssd_pytorch(*ins)
    for a, b, n in zip(out, ref, ("Y_diag", "states")):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert_close(_flat(a), _flat(b), rtol=1e-4, name=n)
    for a, b, n in zip(_grads(out, ins), _grads(ref, ins), ("dB", "dC", "dX", "dA_log", "ddecay")):
        assert a.dtype == b.dtype, n
        assert_close(_flat(a), _flat(b), rtol=1e-4, name=n)


@cpu_interp
def test_complex_chunkwise_per_chunk_triton():
    g = torch.Generator().manual_seed(0)
    Bsz, T, H, N, D = 1, 40, 2, 4, 5
    x, dt = torch.randn(Bsz, T, H, D, generator=g), torch.randn(Bsz, T, H, generator=g)
    A = torch.complex(-torch.rand(H, generator=g) - 0.1, 3 * torch.randn(H, generator=g))
    B_t, C_t = (torch.randn(Bsz, T, H, N, dtype=torch.complex64, generator=g) for _ in range(2))
    assert_close(ssd_complex_chunkwise(x, A, B_t, C_t, dt, chunk_size=16, per_chunk=per_chunk.per_chunk_ssd_triton),
                 ssd_complex_chunkwise(x, A, B_t, C_t, dt, chunk_size=16), rtol=1e-4, name="per_chunk=triton")


@cpu_interp
@pytest.mark.parametrize("cfg", [dict(), dict(Q=8, M=8, D=5, nc=2), dict(Q=40, M=24, D=20, nc=2, s0=False)])
def test_real_chunked_matches_pytorch(cfg):
    ins = _real_inputs(**cfg)
    diff_ins = [t for t in ins if t is not None]
    out, ref = _scan_chunked(*ins), real_ssd_chunked(*ins)
    for a, b, n in zip(out, ref, ("y", "S_final")):
        assert_close(a, b, rtol=1e-4, name=n)
    for a, b, n in zip(_grads(out, diff_ins), _grads(ref, diff_ins), ("dq", "dk", "dx", "dalpha", "dS0")):
        assert_close(a, b, rtol=1e-4, atol=1e-5, name=n)


@pytest.fixture(params=["chunk", "chunk_dx_apart", "walked", "split"])
def backward_path(request, monkeypatch):
    """Each of 05d's backward paths: 05c's one kernel (dx in it, or by scan_dx), its walked form (05c continued: the
    state index in 4 blocks; the test fails unless it ran) and the two kernels + rotate_backward (that one with the
    forward's rotation inside 05b's state pass, `rotate_states_forward`, instead of 05a's own kernel)."""
    tune = dict(real_ssd.TUNE, bwd="split" if request.param == "split" else "chunk",
                chunk_dx=request.param != "chunk_dx_apart", rotate_in_state=request.param == "split",
                walk_split=4 if request.param == "walked" else 1)
    monkeypatch.setattr(real_ssd, "TUNE", tune)
    walked = []
    if request.param == "walked":
        run = real_ssd.scan_backward_walked
        monkeypatch.setattr(real_ssd, "scan_backward_walked", lambda *a, **k: walked.append(1) or run(*a, **k))
    yield request.param
    assert bool(walked) == (request.param == "walked"), f"{request.param}: the walked kernel ran {len(walked)} times"


@cpu_interp
@pytest.mark.parametrize("T,Q,s0", [(70, 32, True), (1, 64, False), (48, 16, True)])
def test_ssd_real_chunkwise_triton_matches_pytorch(T, Q, s0, backward_path):
    "The model's entry point: T not a multiple of the chunk, T=1, initial and final state; gradients to every input."
    ins, init = _ssd_inputs(T=T, s0=s0)
    all_in = ins + ([init] if s0 else [])
    out = real_ssd.ssd_real_chunkwise_triton(*ins, chunk_size=Q, initial_state=init, return_final_state=True)
    ref = ssd_real_chunkwise(*ins, chunk_size=Q, initial_state=init, return_final_state=True)
    assert out[0].shape == ref[0].shape and out[0].dtype == ref[0].dtype and out[1].dtype == ref[1].dtype
    for a, b, n in zip(out, ref, ("y", "final_state")):
        assert_close(_flat(a), _flat(b), rtol=1e-4, name=n)
    names = "dx dA_re dA_im dB_re dB_im dC_re dC_im ddt dinit".split()
    # atol: a gradient that is exactly zero in exact arithmetic (dA at T=1: no phase or decay difference reaches the
    # loss) is fp32 round-off of O(10) terms on both sides
    for a, b, n in zip(_grads(out, all_in), _grads(ref, all_in), names):
        assert_close(_flat(a), _flat(b), rtol=1e-4, atol=5e-5, name=n)


ORACLE_CASES = ("mixed", "T = chunk", "extreme")


def _oracle_inputs(case):
    """x, A_re, A_im, B_re, B_im, C_re, C_im, dt for one case, the generator, and the chunk (64). H=2, N=64 (M=128,
    the model's state, so that the walked backward runs on a GPU too), D=16. "mixed": chapter 05d's case, 40
    reset-like steps (dt = 100, Re A = -5) open each chunk of 64 and ordinary steps follow (|alpha| reaches 2e4: 05a's
    pair is what keeps it exact); "T = chunk": T=64, ordinary decays; "extreme": T=130, softplus(dt)|Re A| log-uniform in
    [50, 4000] per step (softplus(dt) = dt there, in fp32), so every decay between steps vanishes."""
    g = torch.Generator().manual_seed(4)
    H, N, D, Q = 2, 64, 16, 64
    T = {"mixed": 128, "T = chunk": 64, "extreme": 130}[case]
    x = torch.randn(1, T, H, D, generator=g)
    if case == "mixed":
        dt = torch.randn(1, T, H, generator=g)
        dt.view(1, T // Q, Q, H)[:, :, :40] = 100.0
        A_re, A_im = torch.full((H,), -5.0), torch.ones(H)
    elif case == "extreme":
        dt = torch.exp(math.log(50) + torch.rand(1, T, H, generator=g) * math.log(4000 / 50))
        A_re, A_im = torch.full((H,), -1.0), 3 * torch.randn(H, generator=g)
    else:
        dt = torch.randn(1, T, H, generator=g)
        A_re, A_im = -torch.rand(H, generator=g) - 0.1, 3 * torch.randn(H, generator=g)
    return [x, A_re, A_im, *(torch.randn(1, T, H, N, generator=g) for _ in range(4)), dt], g, Q


def _oracle_errors(device, case, packed=False):
    """The fp32 Triton path against the complex128 oracle: ({name: (max |error|, max |oracle|)} for y and the gradients
    of a seeded functional, sigma), sigma = max over heads of sum_t softplus(dt_t)|B_t||C_t||x_t||g_t|, chapter 02's
    natural scale of the gradients to A and dt. `packed`: through the op on one projection, as the model's block calls it."""
    ins, g, Q = _oracle_inputs(case)
    exact = [t.double().requires_grad_() for t in ins]
    ref = ssd_naive_complex(exact[0], *(torch.complex(exact[i], exact[i + 1]) for i in (1, 3, 5)), exact[7]).real
    w = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    want = (ref, *torch.autograd.grad((ref * w).sum(), exact))
    x, _, _, b_re, b_im, c_re, c_im, dt = (t.double() for t in ins)
    norm = lambda re, im: (re.square() + im.square()).sum(-1).sqrt()                  # |B_t|, |C_t| per (t, head)
    sigma = (F.softplus(dt) * norm(b_re, b_im) * norm(c_re, c_im) * x.norm(dim=-1) * w.norm(dim=-1)).sum(1).max().item()
    (_, T, H, D), N = x.shape, b_re.shape[-1]
    A = [t.to(device).requires_grad_() for t in ins[1:3]]
    if packed:                                         # chapter 04's order: x, B_re, B_im, C_re, C_im, dt
        proj = torch.cat([t.reshape(1, T, -1) for t in (ins[0], *ins[3:])], -1).to(device).requires_grad_()
        y = real_ssd.ssd_real_packed_triton(proj, *A, H, D, N, chunk_size=Q)
        dproj, *dA = torch.autograd.grad((y * w.float().to(device)).sum(), [proj, *A])
        dx, *dbc, ddt = real_ssd.packed_parts(dproj, H, D, N)
        got = (y, dx, *dA, *dbc, ddt)
    else:
        dev = [t.to(device).requires_grad_() for t in ins]
        y = real_ssd.ssd_real_chunkwise_triton(*dev, chunk_size=Q)
        got = (y, *torch.autograd.grad((y * w.float().to(device)).sum(), dev))
    names = "y dx dA_re dA_im dB_re dB_im dC_re dC_im ddt".split()
    return {n: ((a.detach().cpu().double() - b).abs().max().item(), b.abs().max().item())
            for n, a, b in zip(names, got, want)}, sigma


def _check_oracle(case, result):
    """y, dx, dB, dC within 2e-6 of their scales: fp32 rounding (measured <= 5.7e-7 in every case; "mixed" was ~2e-4
    with an fp32 alpha, before 05a's pair). The gradients to A and dt are sums of nearly cancelling terms whose true
    value may vanish (extreme decays: ~1e-20): chapter 02's tolerance, 1e-6 sigma plus 1e-4 of the largest (measured
    <= 4.5e-8 sigma, both fp32 paths); where they do not vanish, also within 25% of the largest, which a zero or a
    wrong sign fails."""
    err, sigma = result
    print(case, f"sigma {sigma:.1e}", {n: f"{e / s:.1e}" for n, (e, s) in err.items()})
    for n, (e, scale) in err.items():
        if n in ("dA_re", "dA_im", "ddt"):
            tol = 1e-6 * sigma + 1e-4 * scale
            if case != "extreme": tol = min(tol, 0.25 * scale)
        else:
            tol = 2e-6 * scale
        assert e <= tol, (case, n, e, tol)


@cpu_interp
@pytest.mark.parametrize("case", ORACLE_CASES)
def test_oracle_cases(case, backward_path):
    """The model's entry point against the complex128 oracle through every backward path (interpreter): mixed decays
    (05a's pair), T equal to the chunk, extreme decays."""
    _check_oracle(case, _oracle_errors("cpu", case))


@cpu_interp
def test_oracle_mixed_packed():
    "The mixed case through the packed op, the model's call (its gradient one tensor, split here to compare)."
    _check_oracle("mixed", _oracle_errors("cpu", "mixed", packed=True))


@cpu_interp
def test_long_sequence_large_phase():
    """Phases reduced mod 2*pi (chapter 02): parity at T=2048 with large Im A (|theta| up to ~1e5 rad) against the
    complex128 oracle, the output and the gradients of the phase path (A and dt: fp64 suffix sums over the whole
    sequence, here split over two programs as at a small B*H). d/dIm A carries chapter 02's lever noise (each step's
    float32 phase gradient weighted by theta_t's lever, which grows with t): on 2026-12-05 both float32 paths were
    ~1.05e-4 of its scale off the oracle (Triton 1.04e-4, PyTorch 1.05e-4, in opposite directions: 2.1e-4 apart), so
    its tolerance is 2e-4 of the scale; dA_re and ddt were 1.4e-6 and 6.7e-6 (PyTorch 4.1e-6 and 3.2e-6)."""
    ins, _ = _ssd_inputs(Bsz=1, T=2048, H=1, N=8, D=16, s0=False, im_scale=50.0)
    assert phases.tiles_per_program(1, 1, 2048 // 64, phases.chunks_per_tile(64))[1] == 2    # the split backward runs
    out = real_ssd.ssd_real_chunkwise_triton(*ins, chunk_size=64)
    exact = [t.detach().double().requires_grad_() for t in ins]
    x, a_re, a_im, b_re, b_im, c_re, c_im, dt = exact
    ref = ssd_naive_complex(x, torch.complex(a_re, a_im), torch.complex(b_re, b_im), torch.complex(c_re, c_im), dt).real
    assert_close(out.double(), ref, rtol=1e-4, name="y T=2048")
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad((out * w).sum(), [ins[1], ins[2], ins[7]])
    want = torch.autograd.grad((ref * w.double()).sum(), [a_re, a_im, dt])
    for a, b, n, rtol in zip(got, want, ("dA_re", "dA_im", "ddt"), (1e-4, 2e-4, 1e-4)):
        assert_close(a.double(), b, rtol=rtol, name=f"{n} T=2048")


@cpu_interp
def test_non_unit_last_stride_refused():
    "A kernel operand whose last stride is not 1 is refused by name (the packed op read it as 1: 169% off, no error)."
    H, D, N, T = 2, 8, 4, 20
    proj = torch.randn(1, H * (D + 4 * N + 1), T).transpose(1, 2)                  # features strided by T
    with pytest.raises(ValueError, match="proj must have a unit last stride"):
        real_ssd.ssd_real_packed_triton(proj, -torch.ones(H), torch.ones(H), H, D, N, chunk_size=16)
    with pytest.raises(ValueError, match="last stride 15"):
        phases.strides3(torch.zeros(2, 8, 3, 5).transpose(1, 3))
    q, x = torch.randn(1, 16, 2, 16), torch.randn(1, 16, 16, 2).transpose(2, 3)     # x: last stride 2
    with pytest.raises(ValueError, match="last stride 2"):                           # a public launcher, through strides3
        real_ssd.scan_y(q, q, x, torch.zeros(1, 16, 2), torch.zeros(1, 1, 2, 16, 16), 16)
    real_ssd.scan_y(q, q, x.contiguous(), torch.zeros(1, 16, 2), torch.zeros(1, 1, 2, 16, 16), 16)   # the same, contiguous


@cpu_interp
@pytest.mark.parametrize("bad", [45, 48, 60, -5])
def test_ce_kernel_refuses_out_of_range_targets(bad):
    "05f: a target in the padded columns, at or past the row's end, or negative (not ignore_index) is refused, not read."
    from mamba3_lite.loss_triton import ce_chunk_inplace
    logits, t = torch.randn(4, 48), torch.tensor([1, -100, 39, bad])
    with pytest.raises(RuntimeError, match="every target must be ignore_index"):
        ce_chunk_inplace(logits.clone(), t, 40, block_v=16, num_warps=1)
    loss, grad = ce_chunk_inplace(logits.clone(), torch.tensor([1, -100, 39, 0]), 40, block_v=16, num_warps=1)
    assert torch.isfinite(loss) and grad[1].abs().max() == 0 and grad[:, 40:].abs().max() == 0


@cpu_interp
def test_gradcheck_real_function():
    "fp64 gradcheck through the scan's launchers (their backward is the Triton kernels, in fp64 on the interpreter)."
    ins = _real_inputs(Bsz=1, nc=2, Q=4, H=1, M=4, D=3, dtype=torch.float64)
    assert torch.autograd.gradcheck(_scan_chunked, ins, fast_mode=True)


@cpu_interp
def test_gradcheck_per_chunk_function():
    ins = _pc_inputs(Bsz=1, nc=2, Q=4, H=1, N=2, P=2, x_complex=True, cd=torch.complex128)
    assert torch.autograd.gradcheck(per_chunk.per_chunk_ssd_triton, ins, fast_mode=True)


@cpu_interp
def test_every_gradient_nonzero():
    "No None and no all-zero gradient for any differentiated input, also when only one output reaches the loss."
    ins, init = _ssd_inputs(Bsz=1, T=20, s0=True)
    y, s = real_ssd.ssd_real_chunkwise_triton(*ins, chunk_size=8, initial_state=init, return_final_state=True)
    for g, n in zip(torch.autograd.grad(y.square().sum(), ins + [init]), "x A_re A_im B_re B_im C_re C_im dt init".split()):
        assert g is not None and g.abs().sum() > 0, n
    y, s = real_ssd.ssd_real_chunkwise_triton(*ins, chunk_size=8, initial_state=init, return_final_state=True)
    for g, n in zip(torch.autograd.grad(s.abs().square().sum(), ins[:5] + [ins[7], init]), "x A_re A_im B_re B_im dt init".split()):
        assert g is not None and g.abs().sum() > 0, n                               # y unused: its grad is zeros
    pc = _pc_inputs()
    Y, St = per_chunk.per_chunk_ssd_triton(*pc)
    for g in torch.autograd.grad(Y.abs().square().sum(), pc[:4]):
        assert g is not None and g.abs().sum() > 0


@cpu_interp
def test_per_chunk_a100_backward_variant():
    "05e's backward for sm_80 (RELOAD: B and C read twice, to fit 163 KB of shared memory) equals the H200's, bit for bit."
    ins = _pc_inputs(x_complex=True)
    a, b = (per_chunk.per_chunk_ssd_triton(*ins, backward_config=per_chunk.per_chunk_backward_config(cap))
            for cap in ((8, 0), (9, 0)))
    assert per_chunk.per_chunk_backward_config((8, 0))["RELOAD"] and not per_chunk.per_chunk_backward_config((9, 0))["RELOAD"]
    for x, y, n in zip(_grads(a, ins), _grads(b, ins), ("dB", "dC", "dX", "dA_log", "ddecay")):
        assert torch.equal(x, y), n


LITE_TINY = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=2, head_dim=8, state_dim=8, chunk_size=16, ffn_dim=64)


@cpu_interp
def test_tiny_lite_model_triton_path_equals_pytorch_path(monkeypatch, backward_path):
    """The Lite block hands the kernels its whole projection (05d's packed op, `ssd_real_packed_triton`): in float64
    the model's loss and every parameter's gradient equal the PyTorch path's, for each backward path."""
    monkeypatch.setenv("ENABLE_TRITON_KERNELS", "1")
    from mamba3_lite.model import Mamba3Transformer, ModelConfig
    torch.manual_seed(0)
    ref = Mamba3Transformer(ModelConfig(**LITE_TINY)).double()
    tri = Mamba3Transformer(ModelConfig(**LITE_TINY, ssd_dispatch="triton")).double()
    tri.load_state_dict(ref.state_dict())
    assert all(b.ssd_packed is real_ssd.ssd_real_packed_triton for b in tri.layers)
    for b in tri.layers + ref.layers:                                 # decays and phases that matter at T=37
        b.in_proj.weight.data[-2:].normal_(0, 1.0, generator=torch.Generator().manual_seed(2))
    idx = torch.randint(0, 50, (2, 38), generator=torch.Generator().manual_seed(1))
    l_ref, l_tri = ref(idx[:, :-1], targets=idx[:, 1:]), tri(idx[:, :-1], targets=idx[:, 1:])
    l_ref.backward(); l_tri.backward()
    assert abs(l_ref.item() - l_tri.item()) < 1e-6 * abs(l_ref.item())
    for (n, a), b in zip(tri.named_parameters(), ref.parameters()):
        assert (a.grad - b.grad).abs().max().item() <= 1e-5 * b.grad.abs().max().item() + 1e-12, n


# ---------------------------------------------------------------------------------------------------- GPU (H200)
@pytest.mark.skipif(not (HAS_CUDA and phases.HAS_TRITON), reason="needs CUDA and triton")
class TestGPU:
    "bf16 kernels against the fp32 PyTorch reference on the GPU; max differences are printed (pytest -s)."

    @pytest.fixture(autouse=True)
    def _exact_fp32_reference(self):
        "The fp32 references must not run on TF32 (a Pretrainer earlier in the same process turns it on globally)."
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        yield
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    @pytest.mark.parametrize("T,s0", [(300, True), (2048, False)])
    def test_bf16_parity(self, T, s0, backward_path):
        """Outputs and gradients within 2-3% of the largest fp32 reference value (same bf16-rounded values), ddt
        included (0.3-1.6% in every saved H200 log). d Im A is a sum of phase gradients that nearly cancel, so bf16
        moves it far more: the saved H200 runs (pytest -s, benchmarks/results/gpu_tests_{h200,h200_relayout,
        triton_chunk_h200,rotate_in_state_h200,scan_regs_early_update_h200}.log, 2026-12-01..03, an unseeded
        functional) put it 4.3-11.5% of its scale off at T=300 and 14-84% at T=2048. So it is held to 25% at T=300,
        where a zero or sign-flipped d Im A (100% or 200% off) fails, and at T=2048, where no bf16 bound would
        separate it from zero, its distance is printed, not asserted. The functional is seeded: reruns compare alike."""
        ins, init = _ssd_inputs(Bsz=2, T=T, H=4, N=64, D=64, s0=s0, device="cuda", dtype=torch.bfloat16)
        ref_ins = [t.detach().float().requires_grad_() for t in ins]                 # same values, fp32 reference
        ref_init = None if init is None else init.detach().clone().requires_grad_()
        out = real_ssd.ssd_real_chunkwise_triton(*ins, chunk_size=64, initial_state=init, return_final_state=True)
        ref = ssd_real_chunkwise(*ref_ins, chunk_size=64, initial_state=ref_init, return_final_state=True)
        assert out[0].dtype == torch.bfloat16
        assert_close(out[0].float(), ref[0], rtol=2e-2, name=f"bf16 y T={T}")
        assert_close(_flat(out[1]), _flat(ref[1]), rtol=2e-2, name=f"bf16 final state T={T}")
        all_in, all_ref = ins + ([init] if s0 else []), ref_ins + ([ref_init] if s0 else [])
        gen = torch.Generator().manual_seed(1)
        gy = torch.randn(ref[0].shape, generator=gen).cuda()
        gs = torch.randn(ref[1].shape, dtype=ref[1].dtype, generator=gen).cuda()
        g = torch.autograd.grad((out[0].float() * gy).sum() + (out[1] * gs.conj()).real.sum(), all_in)
        gr = torch.autograd.grad((ref[0] * gy).sum() + (ref[1] * gs.conj()).real.sum(), all_ref)
        for a, b, n in zip(g, gr, "dx dA_re dA_im dB_re dB_im dC_re dC_im ddt dinit".split()):
            if n == "dA_im" and T > 300:
                rel = (a.float() - b).abs().max().item() / b.abs().max().item()
                print(f"bf16 dA_im T={T}: max |diff| / scale = {rel:.3f} (printed only: see the docstring)")
            else:
                assert_close(_flat(a).float(), _flat(b), rtol=0.25 if n == "dA_im" else 3e-2, name=f"bf16 {n} T={T}")

    def test_compiled_lite_model_step_matches_pytorch_path(self, monkeypatch, backward_path):
        """The Lite model compiled through the packed op, bf16 autocast, against the same model in fp32 (PyTorch path):
        loss within 1%, and every gradient no further from fp32 than 5% of its scale or twice the bf16 PyTorch path's
        own distance. d Im A (the phase path) is held to 10% or three times: the kernels multiply the rotated q, k in
        bf16, and the phase gradient is a cancelling sum of their products (test_bf16_parity gives its measured spread);
        the PyTorch path keeps the SSD in fp32. Measured on the H200 (2026-12-01): 6.1% of scale against 2.5%."""
        monkeypatch.setenv("ENABLE_TRITON_KERNELS", "1")
        from mamba3_lite.model import Mamba3Transformer, ModelConfig
        cfg = dict(vocab_size=256, d_model=256, n_layers=2, n_heads=4, head_dim=64, state_dim=64, chunk_size=64, ffn_dim=512)
        torch.manual_seed(0)
        ref = Mamba3Transformer(ModelConfig(**cfg)).cuda()
        tri = Mamba3Transformer(ModelConfig(**cfg, ssd_dispatch="triton")).cuda()
        tri.load_state_dict(ref.state_dict())
        fp32 = Mamba3Transformer(ModelConfig(**cfg)).cuda()
        fp32.load_state_dict(ref.state_dict())
        idx = torch.randint(0, 256, (4, 513), device="cuda")
        losses = []
        for m, amp in ((fp32, False), (ref, True), (torch.compile(tri), True)):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = m(idx[:, :-1], targets=idx[:, 1:])
            loss.backward(); losses.append(loss.item())
        print(f"{backward_path}: loss fp32 {losses[0]:.5f}, bf16 pytorch {losses[1]:.5f}, bf16 triton {losses[2]:.5f}")
        assert abs(losses[0] - losses[2]) < 1e-2 * losses[0]
        bad = []
        for (n, a), b, c in zip(tri.named_parameters(), ref.parameters(), fp32.parameters()):
            err, own = ((g.grad.float() - c.grad).abs().max().item() for g in (a, b))
            rel, times = (1e-1, 3) if n.endswith("A_imag") else (5e-2, 2)
            if err > max(rel * c.grad.abs().max().item(), times * own) + 1e-6:
                bad.append((n, err, own, c.grad.abs().max().item()))
        assert not bad, bad

    @pytest.mark.parametrize("case,packed", [(c, False) for c in ORACLE_CASES] + [("mixed", True)])
    def test_oracle_cases_fp32(self, case, packed, backward_path):
        "The oracle cases compiled for the GPU (05a's fp64 sums and pairs in real code, not the interpreter), fp32."
        _check_oracle(case, _oracle_errors("cuda", case, packed))

    def test_fp32_fused_kernels(self):
        ins = [t.detach().cuda().requires_grad_() if t is not None else None for t in _real_inputs(Q=16, M=16, D=16)]
        out, ref = _scan_chunked(*ins), real_ssd_chunked(*ins)
        for a, b, n in zip(out, ref, ("y", "S_final")):
            assert_close(a, b, rtol=1e-4, name="fp32 gpu " + n)
        for a, b, n in zip(_grads(out, ins), _grads(ref, ins), ("dq", "dk", "dx", "dalpha", "dS0")):
            assert_close(a, b, rtol=1e-4, atol=1e-5, name="fp32 gpu " + n)

    def test_per_chunk_gpu(self):
        ins = [t.detach().cuda().requires_grad_() for t in _pc_inputs(Q=16, N=16, P=16, H=2, x_complex=True)]
        out, ref = per_chunk.per_chunk_ssd_triton(*ins), per_chunk_ssd_pytorch(*ins)
        for a, b, n in zip(out, ref, ("Y_diag", "states")):
            assert_close(_flat(a), _flat(b), rtol=1e-4, name="gpu per-chunk " + n)
        for a, b, n in zip(_grads(out, ins), _grads(ref, ins), ("dB", "dC", "dX", "dA_log", "ddecay")):
            assert_close(_flat(a), _flat(b), rtol=1e-4, name="gpu per-chunk " + n)


    @pytest.mark.parametrize("cap", [(8, 0), (9, 0)])
    def test_per_chunk_gpu_backward_configs(self, cap):
        "The A100's backward variant of 05e (RELOAD) and the H200's both give the reference gradients on this GPU."
        ins = [t.detach().cuda().requires_grad_() for t in _pc_inputs(Q=16, N=16, P=16, H=2, x_complex=True)]
        out = per_chunk.per_chunk_ssd_triton(*ins, backward_config=per_chunk.per_chunk_backward_config(cap))
        ref = per_chunk_ssd_pytorch(*ins)
        for a, b, n in zip(_grads(out, ins), _grads(ref, ins), ("dB", "dC", "dX", "dA_log", "ddecay")):
            assert_close(_flat(a), _flat(b), rtol=1e-4, name=f"gpu per-chunk sm_{cap[0]}{cap[1]} config " + n)
