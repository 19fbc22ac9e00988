"""Every Triton kernel of the package compiles for the A100 (sm_80) and the H100/H200 (sm_90), and fits in its shared memory.

No GPU is needed: Triton compiles for a target it does not have. A worker process (one per target, both at once) runs
the package's real entry points -- `ssd_real_packed_triton` forward and backward on an in_proj output, as the model's
block calls it; `ssd_real_chunkwise_triton` on the slices `Mamba3Block.split_projection` makes, with 05d's one-kernel
backward and with the two-kernel one (`TUNE["bwd"] = "split"`, with 05b's rotation inside the state pass);
`scan_backward`; chapter 09f's scan ops in bf16 (the
paper's Mamba-3 SISO layer on these kernels, its backward 05c's one kernel without the rotation); `per_chunk_ssd_triton`; and
chapter 05f's `ce_chunk_inplace`, the loss head's softmax pass -- on meta tensors, with every `@triton.jit` kernel replaced by
a recorder and `device_capability` returning the target's. So each launch's arguments, constexprs, warps and stages
are exactly what the launchers (and the config functions they call: 05d's `tune_for`, 05e's
`per_chunk_backward_config`) choose on that GPU. The worker derives each kernel's signature and specialisation from
those arguments with Triton's own binder, compiles it for the target with `triton.compile`, and reports
`metadata.shared`. Shapes: the default 434M model and the tiny preset's, bf16 and fp32; training (no state; also at
the h200 preset's 16 sequences, where sm_90 takes the state passes' wide tiles, elsewhere each pass's own), with an
initial and a final state in the loss, a 37-token prefill, the scan's backward without the phase gradient; the
per-chunk kernel with real and complex X.

Every configuration on the model's path (what `python -m mamba3_lite.pretrain` runs) is compiled fully, to a cubin, and
so is 05c's walked one-kernel backward (opt-in by 05d's `TUNE["walk_split"]`; here at 4 blocks, 168 registers), for
the Lite model's SSD and the paper's Mamba-3 scan.
Off the model's path at the default model's shapes -- the per-chunk kernel, whose fp32 64x64 products compile to
unrolled FMAs for 2-3 minutes each, and `scan_backward(want_dtheta=False)` -- the worker stops, for CI's time, after
Triton's shared-memory allocation pass, the step that sets `metadata.shared` ("alloc"); the test checks that this
figure equals the full compile's on every configuration compiled fully. `python tests/test_aot_compile.py 80 --full`
compiles those too (run for 80 and 90 on 2026-12-01, triton 3.9: all 64 + 64 configurations reach a cubin, each
allocation figure equals its full compile's; 3-4 minutes per target on one core).

Run alone: `python tests/test_aot_compile.py 80` prints one JSON record per compiled configuration.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = (80, 90)


# ------------------------------------------------------------------------------------------------ the worker
def _worker(cap: int, full: bool):
    import tempfile
    os.environ.pop("TRITON_INTERPRET", None)                 # the interpreter would replace @triton.jit
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")   # Triton 3.9's default, said aloud (silences a warning)
    cache = tempfile.TemporaryDirectory(prefix="aot-triton-cache-")
    os.environ["TRITON_CACHE_DIR"] = cache.name              # a fresh cache: every figure is compiled here
    import types
    import torch
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature
    from mamba3_lite.model import Mamba3Block, ModelConfig
    from mamba3_lite.train.config import TINY_MODEL
    from mamba3_lite.ssd.triton import chunk_scan, chunk_state, chunk_walk, per_chunk, phases, real_ssd
    from mamba3_lite import loss_triton
    from mamba3_lite.mamba3 import siso_triton
    assert not phases.INTERPRET
    mods = (phases, chunk_state, chunk_scan, chunk_walk, real_ssd, per_chunk, loss_triton)
    capability, target = (cap // 10, cap % 10), GPUTarget("cuda", cap, 32)
    backend = make_backend(target)

    calls, scenario = [], [""]      # scenario: (label, compiled fully? — the model's path, and the walked backward's opt-in)

    class Recorder:
        def __init__(self, fn): self.fn = fn
        def __getitem__(self, grid): return lambda *a, **k: calls.append((self.fn, a, k, scenario[0]))

    jit = {n: (m, v) for m in mods for n, v in vars(m).items() if isinstance(v, JITFunction) and v.__module__ == m.__name__}
    called = {n for n in jit if any(re.search(rf"\b{n}\(", f.src) for k, (_, f) in jit.items() if k != n)}   # device helpers
    for name, (m, v) in jit.items():
        if name not in called:
            setattr(m, name, Recorder(v))                     # a launch records its arguments instead of running
    for m in (real_ssd, per_chunk, siso_triton):
        m.require_triton = lambda *t: None                    # meta tensors: shapes and strides, no data
        m.device_capability = lambda t: capability
    loss_triton.require_triton = lambda *t: None

    def direct(forward, setup_context, backward):
        "A custom op's own autograd wiring (05d's setup_context and backward), minus the dispatcher: on meta tensors an op would run its fake, not its kernels."
        class Direct(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                out = forward(*inputs)
                setup_context(ctx, inputs, out)
                return out
            @staticmethod
            def backward(ctx, *grads): return backward(ctx, *grads)
        return Direct.apply
    real_ssd.ssd_real_fwd = direct(real_ssd.ssd_kernels_forward, real_ssd._setup_context, real_ssd._backward)
    real_ssd.ssd_real_bwd = real_ssd.ssd_kernels_backward
    real_ssd.ssd_real_packed_fwd = direct(real_ssd.ssd_packed_kernels_forward, real_ssd._packed_setup_context,
                                          real_ssd._packed_backward)          # what the model's block calls
    real_ssd.ssd_real_packed_bwd = real_ssd.ssd_packed_kernels_backward

    def model_ssd(cfg, dtype, T, state, backward, B=2, packed=True):
        "The SSD as the block calls it: the packed op on the in_proj output, or (packed=False) the six slices."
        H, D, N = cfg.n_heads, cfg.head_dim, cfg.state_dim
        z = torch.empty(B, T, H * (D + 4 * N + 1), dtype=dtype, device="meta", requires_grad=True)
        A = [torch.empty(H, device="meta", requires_grad=True) for _ in range(2)]      # fp32 parameters
        init = torch.empty(B, H, N, D, dtype=torch.complex64, device="meta", requires_grad=True) if state else None
        if packed:
            out = real_ssd.ssd_real_packed_triton(z, *A, H, D, N, cfg.chunk_size, initial_state=init,
                                                  return_final_state=state or not backward)
        else:
            x, B_re, B_im, C_re, C_im, dt = Mamba3Block.split_projection(types.SimpleNamespace(cfg=cfg), z)
            out = real_ssd.ssd_real_chunkwise_triton(x, *A, B_re, B_im, C_re, C_im, dt, cfg.chunk_size,
                                                     initial_state=init, return_final_state=state or not backward)
        if backward:
            loss = (out[0].sum() + torch.view_as_real(out[1]).sum()) if state else out.sum()
            torch.autograd.grad(loss, [z, *A] + ([init] if state else []))

    def scan_no_dtheta(cfg, dtype, B=2):
        T, H, M, D, Q = cfg.max_seq_len, cfg.n_heads, 2 * cfg.state_dim, cfg.head_dim, cfg.chunk_size
        q, k = (torch.empty(B, T, H, M, dtype=dtype, device="meta") for _ in range(2))
        x = torch.empty(B, T, H, D, dtype=dtype, device="meta")
        alpha = torch.empty(B, -(-T // Q) * Q, H, device="meta")
        real_ssd.scan_backward(q, k, x, alpha, None, Q, torch.empty_like(x), None, want_dtheta=False)

    def siso_scan(cfg, dtype, B=2):
        "The paper's Mamba-3 SISO scan, chapter 09f's two ops (forward, then backward) at the block's shapes: M = 2 state_dim."
        T, H, M, D, Q = cfg.max_seq_len, cfg.n_heads, 2 * cfg.state_dim, cfg.head_dim, cfg.chunk_size
        q, k = (torch.empty(B, T, H, M, dtype=dtype, device="meta") for _ in range(2))
        x = torch.empty(B, T, H, D, dtype=dtype, device="meta")
        alpha, alpha_lo = (torch.empty(B, -(-T // Q) * Q, H, device="meta") for _ in range(2))   # 05a's pair, as the layer
        siso_triton.scan_kernels_forward(q, k, x, alpha, None, Q, alpha_lo)
        siso_triton.scan_kernels_backward(torch.empty_like(x), None, q, k, x, alpha, None, Q, alpha_lo)

    def per_chunk_ssd(cfg, x_complex, B=2):
        nc, Q, H, N, P = cfg.max_seq_len // cfg.chunk_size, cfg.chunk_size, cfg.n_heads, cfg.state_dim, cfg.head_dim
        mk = lambda *s, dt=torch.complex64: torch.empty(*s, dtype=dt, device="meta", requires_grad=True)
        ins = [mk(B, nc, Q, H, N), mk(B, nc, Q, H, N), mk(B, nc, Q, H, P, dt=torch.complex64 if x_complex else torch.float32),
               mk(B, nc, Q, H, dt=torch.complex128), mk(B, nc, Q, H, dt=torch.complex128)]
        y, s = per_chunk.per_chunk_ssd_triton(*ins)
        torch.autograd.grad(torch.view_as_real(y).sum() + torch.view_as_real(s).sum(), ins)

    def loss_head(cfg, dtype, rows=4096):
        "Chapter 05f's softmax pass as chapter 03b's loss head launches it on one block of logits (the h200 preset's padding)."
        Vp = -(-cfg.vocab_size // 64) * 64
        logits = torch.empty(rows, Vp, dtype=dtype, device="meta")
        loss_triton.ce_chunk_inplace(logits, torch.empty(rows, dtype=torch.long, device="meta"), cfg.vocab_size)

    models = {"default": ModelConfig(), "tiny": ModelConfig(**TINY_MODEL)}
    for mname, cfg in models.items():
        for dtype in (torch.bfloat16, torch.float32):
            d = str(dtype).removeprefix("torch.")
            for label, kw in (("train", dict(T=cfg.max_seq_len, state=False, backward=True)),
                              ("state in and out", dict(T=cfg.max_seq_len, state=True, backward=True)),
                              ("prefill T=37", dict(T=37, state=False, backward=False))):
                scenario[0] = (f"{mname} {d} {label}", True)
                model_ssd(cfg, dtype, **kw)
            if mname == "default" and dtype == torch.bfloat16:     # the h200 preset's micro-batch: 256 (batch, head)
                scenario[0] = (f"{mname} {d} train, 16 sequences", True)      # pairs, 05d's wide state tiles on sm_90
                model_ssd(cfg, dtype, T=cfg.max_seq_len, state=False, backward=True, B=16)
            scenario[0] = (f"{mname} {d} train, six slices", False)
            model_ssd(cfg, dtype, T=cfg.max_seq_len, state=True, backward=True, packed=False)
            # the two-kernel backward and the rotation's transpose; the forward's rotation inside the state pass
            real_ssd.TUNE.update(bwd="split", rotate_in_state=True)
            scenario[0] = (f"{mname} {d} train, two-kernel backward, rotation in the state pass", False)
            model_ssd(cfg, dtype, T=cfg.max_seq_len, state=True, backward=True)
            real_ssd.TUNE.update(bwd="chunk", rotate_in_state=False)
            scenario[0] = (f"{mname} {d} scan_backward(want_dtheta=False)", False)
            scan_no_dtheta(cfg, dtype)
            scenario[0] = (f"{mname} {d} loss head", True)
            loss_head(cfg, dtype)
            if dtype == torch.bfloat16:        # ModelConfig(mixer="mamba3", ssd_dispatch="triton") under bf16 autocast
                scenario[0] = (f"{mname} {d} mamba3 siso scan", True)
                siso_scan(cfg, dtype)
                # 05c's walked one-kernel backward, opt-in (`walk_split`): compiled fully, as a tune would launch it
                # (the tiny model's M/2 = 16 leaves blocks too small for tl.dot: it keeps the whole kernel)
                real_ssd.TUNE.update(walk_split=4, walk_maxnreg=168)
                scenario[0] = (f"{mname} {d} train, walked backward", True)
                model_ssd(cfg, dtype, T=cfg.max_seq_len, state=False, backward=True)
                scenario[0] = (f"{mname} {d} mamba3 siso scan, walked backward", True)
                siso_scan(cfg, dtype)
                real_ssd.TUNE.update(walk_split=1, walk_maxnreg=None)
        for xc in (False, True):
            scenario[0] = (f"{mname} per_chunk {'complex' if xc else 'real'} X", False)
            per_chunk_ssd(cfg, xc)

    def specialise(fn, args, kwargs):
        "What JITFunction.run does before compiling: bind, specialise (dtypes, 16-divisibility, ==1), parse options."
        kwargs = dict(kwargs, debug=fn.debug or knobs.runtime.debug,
                      instrumentation_mode=knobs.compilation.instrumentation_mode,
                      fpsan_homomorphic_casts=knobs.compilation.fpsan_homomorphic_casts)
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        return fn._pack_args(backend, kwargs, bound, spec, opts)

    def alloc_shared(fn, sig, cx, attrs, options):
        "metadata.shared without the slow lowering: ttir, ttgir, then make_llir's passes up to shared-memory allocation."
        from triton._C.libtriton import ir, nvidia, passes
        from triton.backends.nvidia.compiler import get_ptx_version_from_options
        src, ctx, stages = ASTSource(fn, sig, cx, attrs), ir.context(), {}
        ir.load_dialects(ctx)
        backend.load_dialects(ctx)
        mod = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), ctx)
        backend.add_stages(stages, options, src.language)
        md = {}
        mod = stages["ttgir"](stages["ttir"](mod, md), md)
        pm = ir.pass_manager(mod.context)
        passes.ttgpuir.add_combine_tensor_select_and_if(pm)
        passes.ttgpuir.add_allocate_warp_groups(pm, False)
        passes.convert.add_scf_to_cf(pm)
        passes.gluon.add_inliner(pm)
        nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, cap, get_ptx_version_from_options(options, target.arch))
        pm.run(mod, "aot-alloc")
        return mod.get_int_attr("ttg.shared")

    unique = {}
    for fn, args, kwargs, scen in calls:
        options, sig, cx, attrs = specialise(fn, args, kwargs)
        key = repr((fn.__name__, sig, sorted(cx.items()), sorted(attrs.items()), sorted(options.__dict__.items())))
        if key not in unique:
            names = {fn.arg_names[i[0]]: v for i, v in cx.items() if fn.params[i[0]].is_constexpr}
            unique[key] = dict(kernel=fn.__name__, target=f"sm_{cap}", scenarios=[], full=False,
                               options=options, sig=sig,
                               cx=cx, attrs=attrs, fn=fn,
                               config={**names,
                                       "num_warps": options.num_warps, "num_stages": options.num_stages},
                               dtypes=sorted({t for t in sig.values() if t.startswith("*")}))
        unique[key]["scenarios"].append(scen[0])
        unique[key]["full"] |= scen[1]
    for rec in unique.values():
        t0 = time.perf_counter()
        fn, slow = rec.pop("fn"), not rec["full"] and rec["scenarios"][0].startswith("default")
        sig, cx, attrs, options = (rec.pop(k) for k in ("sig", "cx", "attrs", "options"))
        rec["shared_alloc"] = alloc_shared(fn, sig, cx, attrs, options)
        if full or not slow:
            ck = triton.compile(ASTSource(fn, sig, cx, attrs), target=target, options=options.__dict__)
            rec["shared_full"] = ck.metadata.shared
            assert ck.asm.get("cubin"), "no cubin"
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(rec), flush=True)
    launched = {r["kernel"] for r in unique.values()}
    helpers = {n for n in called if any(f"{n}(" in jit[k][1].src for k in launched)}
    print(json.dumps(dict(jit_functions=sorted(jit), launched=sorted(launched), helpers=sorted(helpers),
                          shared_limit=phases.MAX_SHARED_PER_BLOCK[capability])), flush=True)
    cache.cleanup()


# ------------------------------------------------------------------------------------------------ the tests
# Never import triton (or the kernels) in the pytest process: on a CPU, Triton's interpreter works only if the
# process's first `import triton` already sees TRITON_INTERPRET=1, which tests/test_triton.py needs and this file must not set.
import importlib.util
if importlib.util.find_spec("triton") is None: pytest.skip("triton is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def compiled():
    "{target: (records, summary)} from one worker per target, run at once (two CPU cores)."
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    procs = {cap: subprocess.Popen([sys.executable, __file__, str(cap)], cwd=ROOT, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE) for cap in TARGETS}
    out = {}
    for cap, p in procs.items():
        stdout, stderr = p.communicate(timeout=1500)      # sm_80's fp32 one-kernel backward alone: ~700 s of ptxas
        assert p.returncode == 0, f"sm_{cap} worker failed:\n{stderr[-4000:]}"
        lines = [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]
        out[cap] = (lines[:-1], lines[-1])
    print(f"\nAOT compile: {sum(len(r) for r, _ in out.values())} kernel configurations, "
          f"{time.perf_counter() - t0:.0f} s wall")
    return out


def test_every_kernel_fits_its_target(compiled):
    "Each configuration the launchers pick compiles for sm_80 and sm_90 and fits that target's shared memory per block."
    over = []
    for cap, (recs, summary) in compiled.items():
        limit = summary["shared_limit"]                     # phases.MAX_SHARED_PER_BLOCK, read by the worker
        for r in recs:
            shared = r.get("shared_full", r["shared_alloc"])
            print(f"sm_{cap} {r['kernel']:18s} {shared:7,d} B  {r['config']}  {r['scenarios'][0]}")
            if shared > limit:
                over.append(f"{r['kernel']} on sm_{cap}: {shared:,} B of shared memory > {limit:,} B, config "
                            f"{r['config']}, for {r['scenarios']}")
    assert not over, "kernels that would not launch:\n" + "\n".join(over)


def test_every_jit_function_is_covered(compiled):
    "Every @triton.jit function of the package is compiled here, or called from one that is."
    for cap, (recs, s) in compiled.items():
        missing = set(s["jit_functions"]) - set(s["launched"]) - set(s["helpers"])
        assert not missing, f"sm_{cap}: @triton.jit functions no scenario launches: {sorted(missing)}"
        assert {r["kernel"] for r in recs} == set(s["launched"])
        assert len(s["launched"]) >= 12, s                      # 8 on the model's path, 2 off it, 2 per-chunk


def test_alloc_figure_equals_full_compile(compiled):
    "The allocation-pass figure (used alone for the slow per-chunk compiles) is the full compile's metadata.shared."
    for cap, (recs, _) in compiled.items():
        both = [r for r in recs if "shared_full" in r]
        assert all("shared_full" in r for r in recs if r["full"]) and len(both) >= 0.8 * len(recs)
        bad = [(r["kernel"], r["config"], r["shared_alloc"], r["shared_full"]) for r in both
               if r["shared_alloc"] != r["shared_full"]]
        assert not bad, f"sm_{cap}: {bad}"


def test_launchers_choose_by_capability(compiled):
    """sm_80 gets the per-chunk backward that reloads B and C (05e); sm_90 keeps the H200's, 05d's wide state tiles
    at the h200 preset's 16 sequences and each state pass's own 8-warp tiles at two (32 pairs: the other scenarios);
    every target both dtypes."""
    for cap, (recs, _) in compiled.items():
        pc = [r for r in recs if r["kernel"] == "_pc_bwd_kernel"]
        assert pc and all(r["config"]["RELOAD"] == (cap < 90) for r in pc), pc
        assert {"*bf16", "*fp32"} <= {d for r in recs for d in r["dtypes"]}
        wide = {r["kernel"] for r in recs if r["kernel"] in ("state_fwd_kernel", "state_bwd_kernel")
                and (r["config"]["BM"], r["config"]["num_stages"]) == (64, 2)}      # 05d's `state_wide`, Hopper only
        assert wide == ({"state_fwd_kernel", "state_bwd_kernel"} if cap == 90 else set()), (cap, wide)
        few = {(r["kernel"], r["config"]["BM"], r["config"]["BD"], r["config"]["num_stages"]) for r in recs
               if r["kernel"] in ("state_fwd_kernel", "state_bwd_kernel") and r["config"]["num_warps"] == 8
               and any(sc.startswith("default") for sc in r["scenarios"])}   # the tiny model's tiles shrink to its M, D
        want = {("state_fwd_kernel", 64, 64, 4), ("state_bwd_kernel", 64, 64, 4)}     # 05d's state_few_* on Hopper
        assert few == (want if cap == 90 else set()), (cap, few)


def _nested_targets(fn):
    "The lines of the assignments in `fn` whose target nests a tuple, as `(a, b), c = ...`."
    import ast
    tuples = lambda t: isinstance(t, (ast.Tuple, ast.List))
    return [node.lineno for node in ast.walk(fn) if isinstance(node, ast.Assign)
            for t in node.targets if tuples(t) and any(tuples(e) for e in t.elts)]


def test_kernels_keep_flat_assignment_targets():
    """Triton 3.6 (the GPU image's, 2026-12-05) computes a kernel's cache key with a dependency finder that fails on a
    nested tuple target (`TypeError: unhashable type: 'list'`); Triton 3.9, which CI compiles with, accepts it. So no
    `@triton.jit` function of the package may unpack into nested tuples (05e's kernels did, found on an H100). Checked
    on a CPU with triton 3.6.0 installed beside the package: every JITFunction's `cache_key` computes (41 of 41), where
    before the fix 05e's two kernels failed."""
    import ast, glob
    jitted = lambda f: any("jit" in ast.unparse(d) for d in f.decorator_list)
    bad = []
    for path in sorted(glob.glob(os.path.join(ROOT, "mamba3_lite", "**", "*.py"), recursive=True)):
        tree = ast.parse(open(path, encoding="utf-8").read())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and jitted(fn):
                bad += [f"{os.path.relpath(path, ROOT)}:{line} in {fn.name}" for line in _nested_targets(fn)]
    assert not bad, "nested tuple targets in Triton kernels: " + ", ".join(bad)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), full="--full" in sys.argv[2:])
