"""Parity of the Mamba-3 SISO functions (chapter 09c) in float64: chunked == naive == step, outputs, final states and
gradients, on a few uneven shapes; plus the argument checks and the λ ≡ 1 reduction to the Lite recurrence."""
import math

import pytest
import torch
import torch.nn.functional as F

from mamba3_lite.mamba3.siso import mamba3_siso_chunked, mamba3_siso_naive, mamba3_siso_step, mamba3_siso_zero_state
from mamba3_lite.ssd.naive import ssd_naive_complex


def _problem(Bsz, T, H, N, P, R, decay=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    dt = F.softplus(r(Bsz, T, H) - 1)
    A = -(torch.rand(Bsz, T, H, generator=g, dtype=torch.float64) + 0.05) * decay
    return dict(q=r(Bsz, T, H, N), k=r(Bsz, T, H, N), v=r(Bsz, T, H, P), adt=A * dt, dt=dt, trap=2 * r(Bsz, T, H),
                angles=2 * r(Bsz, T, H, R), D=r(H), z=r(Bsz, T, H, P), q_bias=1 + r(H, N), k_bias=1 + r(H, N))


def _state(Bsz, H, N, P, R, seed=1):
    g = torch.Generator().manual_seed(seed)
    phi, h, k, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((Bsz, H, R), (Bsz, H, P, N), (Bsz, H, N), (Bsz, H, P)))
    return torch.remainder(3 * phi, 2 * math.pi), h, k, v


def _circ(a, b):
    return (torch.remainder(a - b + math.pi, 2 * math.pi) - math.pi).abs().max().item()


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-300)).item()


@pytest.mark.parametrize("T,Q,N,R,decay", [(130, 64, 8, 3, 1.0), (64, 64, 6, 3, 1.0), (37, 16, 8, 1, 1.0), (70, 32, 4, 2, 1e3)])
def test_chunked_equals_naive(T, Q, N, R, decay):
    p, st = _problem(2, T, 3, N, 4, R, decay), _state(2, 3, N, 4, R)
    y0, s0 = mamba3_siso_naive(**p, initial_state=st, return_final_state=True)
    y1, s1 = mamba3_siso_chunked(**p, initial_state=st, return_final_state=True, chunk_size=Q)
    assert _rel(y1, y0) < 1e-11
    assert _circ(s1[0], s0[0]) < 1e-11 and all(_rel(a, b) < 1e-11 for a, b in zip(s1[1:], s0[1:]))


def test_gradients_match():
    p, st = _problem(1, 70, 2, 6, 3, 2), _state(1, 2, 6, 3, 2)
    def grads(fn, **kw):
        leaves = [t.clone().requires_grad_() for t in (*p.values(), *st)]
        ins = dict(zip(p, leaves[: len(p)]))
        y, (phi, h, _, _) = fn(**ins, initial_state=tuple(leaves[len(p):]), return_final_state=True, **kw)
        (y.sin().sum() + h.square().sum() + phi.cos().sum()).backward()
        return [t.grad for t in leaves]
    for a, b in zip(grads(mamba3_siso_chunked, chunk_size=32), grads(mamba3_siso_naive)):
        assert _rel(a, b) < 1e-11


def test_split_and_decode_equal_one_pass():
    p, st = _problem(2, 90, 3, 8, 4, 4), _state(2, 3, 8, 4, 4)
    cut = lambda a, b: {k: (v[:, a:b] if v.dim() >= 3 else v) for k, v in p.items()}
    y_full, s_full = mamba3_siso_chunked(**p, initial_state=st, return_final_state=True, chunk_size=32)
    y1, s1 = mamba3_siso_chunked(**cut(0, 41), initial_state=st, return_final_state=True, chunk_size=32)
    y2, s2 = mamba3_siso_chunked(**cut(41, None), initial_state=s1, return_final_state=True, chunk_size=32)
    assert _rel(torch.cat([y1, y2], 1), y_full) < 1e-12 and _rel(s2[1], s_full[1]) < 1e-12
    state, ys = s1, [y1]
    for t in range(41, 90):
        y_t, state = mamba3_siso_step(**{k: (v[:, t] if v.dim() >= 3 else v) for k, v in p.items()}, state=state)
        ys.append(y_t[:, None])
    assert _rel(torch.cat(ys, 1), y_full) < 1e-12 and _rel(state[1], s_full[1]) < 1e-12 and _circ(state[0], s_full[0]) < 1e-12


def test_lambda_one_constant_rate_is_the_lite_recurrence():
    Bsz, T, H, Nc, P = 1, 50, 2, 3, 4
    g = torch.Generator().manual_seed(3)
    x = torch.randn(Bsz, T, H, P, generator=g, dtype=torch.float64)
    A = torch.complex(-torch.rand(H, generator=g, dtype=torch.float64) - 0.1, torch.tensor([1.0, -2.5], dtype=torch.float64))
    B_t = torch.randn(Bsz, T, H, Nc, generator=g, dtype=torch.complex128)
    C_t = torch.randn(Bsz, T, H, Nc, generator=g, dtype=torch.complex128)
    dt_raw = torch.randn(Bsz, T, H, generator=g, dtype=torch.float64)
    Delta = F.softplus(dt_raw)
    pairs = lambda re, im: torch.stack([re, im], -1).flatten(-2)
    y = mamba3_siso_chunked(q=pairs(C_t.real, C_t.imag), k=pairs(B_t.real, -B_t.imag) / Delta[..., None], v=x,
                            adt=Delta * A.real, dt=Delta, trap=torch.full_like(Delta, math.inf),
                            angles=torch.atanh(A.imag / math.pi).expand(Bsz, T, H)[..., None].expand(Bsz, T, H, Nc),
                            chunk_size=16)
    assert _rel(y, ssd_naive_complex(x, A, B_t, C_t, dt_raw).real) < 1e-12


def test_extreme_decay_float32_is_finite():
    p = {k: v.float().requires_grad_() for k, v in _problem(1, 130, 2, 8, 4, 4, decay=1e4).items()}
    y = mamba3_siso_chunked(**p)
    y.sum().backward()
    assert torch.isfinite(y).all() and all(torch.isfinite(t.grad).all() for t in p.values())


@pytest.mark.parametrize("field,bad", [("angles", (2, 5, 3, 5)), ("trap", (2, 5, 4)), ("k_bias", (3, 9)), ("z", (2, 5, 3, 5))])
def test_bad_shape_names_the_argument(field, bad):
    p = _problem(2, 5, 3, 8, 4, 2)
    with pytest.raises(ValueError, match=field):
        mamba3_siso_chunked(**{**p, field: torch.zeros(bad, dtype=torch.float64)})


def test_zero_state_shapes():
    phi, h, k, v = mamba3_siso_zero_state(2, 3, 8, 4, 2)
    assert (phi.shape, h.shape, k.shape, v.shape) == ((2, 3, 2), (2, 3, 4, 8), (2, 3, 8), (2, 3, 4))
