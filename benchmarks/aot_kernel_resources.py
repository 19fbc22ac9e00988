"""Registers, spilled bytes and shared memory of 05c's one-kernel backward (`bwd_chunk_kernel`) compiled for an
sm_90 (or sm_80) GPU on a machine without one: Triton compiles for a target it does not have, and the cubin's resource
usage is read back with the `cuobjdump` Triton ships. No timing (see `bench_bwd_chunk.py` on a GPU for that): a quick
way to try a change to the kernel's body against the register budget before spending GPU time on it.

    python benchmarks/aot_kernel_resources.py                       # the package's kernel, sm_90, 4 warps, 1 stage
    python benchmarks/aot_kernel_resources.py --file my_variant.py  # a variant: a file defining bwd_chunk_kernel
    python benchmarks/aot_kernel_resources.py --split 0 2 4 --warps 4 8 --maxnreg 0 168 128   # and 05c's walked form
    python benchmarks/aot_kernel_resources.py --has-lo 1 0          # with 05a's alpha pair (the package) and without
    python benchmarks/aot_kernel_resources.py --has-lo 1 0 --others # and the other kernels that read the pair

`--split S` (S > 0) compiles the package's walked form instead (`bwd_chunk_walk_kernel`, the state index in S blocks;
0 is the whole kernel), `--maxnreg R` caps the registers (0: no cap); every combination of warps, splits and caps.

The kernel is specialised as the model launches it at the 434M model's training shape: bf16 q, k, x, dy, states and
outputs, fp32 decays (05a's hi + lo pair unless `--has-lo 0`), cos, sin and decay pieces, the rotation's transpose and dx in the kernel, 64-row chunks, M/2 = 64,
D = 64, every pointer and stride divisible by 16 (T and NC not specialised). Register counts depend on the Triton
version (the figures in the JSON name it): compare variants on one machine.
"""
import argparse, importlib.util, os, re, subprocess, tempfile

FP32_ARGS = {"a_ptr", "al_ptr", "cos_ptr", "sin_ptr", "da_ptr", "kdk_ptr", "gs_ptr", "dth_ptr"}
CONSTEXPRS = dict(ROTATE=True, WITH_DX=True, HAS_LO=True, F64=False, PREC="tf32", BQ=64, BN=64, BD=64)


def resources(kernel, arch: int, num_warps: int, num_stages: int, constexprs=CONSTEXPRS, fp32_args=FP32_ARGS,
              maxnreg: int | None = None) -> dict:
    """Compile `kernel` (by default a @triton.jit bwd_chunk_kernel; another kernel names its own `constexprs` and fp32
    pointers, every other pointer bf16) for sm_`arch`, its registers capped at `maxnreg` if given; its registers,
    stack (spills) and shared memory."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = kernel.arg_names
    sig = {n: "constexpr" if n in constexprs else ("*fp32" if n in fp32_args else "*bf16") if n.endswith("_ptr") else "i32"
           for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n not in constexprs and n not in ("T", "NC")}
    compiled = triton.compile(ASTSource(kernel, sig, dict(constexprs), attrs), target=GPUTarget("cuda", arch, 32),
                              options=dict(num_warps=num_warps, num_stages=num_stages,
                                           **({"maxnreg": maxnreg} if maxnreg else {})))
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "k.cubin")
        with open(cubin, "wb") as f: f.write(compiled.asm["cubin"])
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        usage = subprocess.run([tool, "--dump-resource-usage", cubin], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", usage)
    return {"registers": int(m[1]), "stack_bytes": int(m[2]), "shared_bytes": compiled.metadata.shared}


# the other kernels that take 05a's pair, as 05d's TUNE launches them on sm_90 at the training shape (B*H = 256):
# (kernel, constexprs, fp32 pointers, warps, stages, register cap)
OTHERS = lambda chunk_scan, chunk_state: [
    (chunk_scan.scan_fwd_kernel, dict(F64=False, PREC="tf32", BC=64, BM=128, BD=64), {"a_ptr", "al_ptr"}, 4, 1, 168),
    (chunk_state.state_fwd_kernel, dict(HAS_S0=False, F64=False, PREC="tf32", BQ=64, BM=64, BD=64),
     {"a_ptr", "al_ptr", "s0_ptr", "sf_ptr"}, 4, 2, None),
    (chunk_scan.bwd_dx_kernel, dict(F64=False, PREC="tf32", BC=64, BM=128, BD=64), {"a_ptr", "al_ptr"}, 4, 2, None)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", help="a Python file defining bwd_chunk_kernel (default: the package's)")
    p.add_argument("--arch", type=int, default=90); p.add_argument("--warps", type=int, nargs="+", default=[4])
    p.add_argument("--split", type=int, nargs="+", default=[0], help="0: the whole kernel; S: the walked one, S blocks")
    p.add_argument("--maxnreg", type=int, nargs="+", default=[0], help="register caps to try (0: none)")
    p.add_argument("--has-lo", type=int, nargs="+", default=[1], help="1: alpha as 05a's pair (the package); 0: alone")
    p.add_argument("--others", action="store_true", help="also the forward kernels and the dx kernel (`OTHERS`)")
    p.add_argument("--stages", type=int, default=1); p.add_argument("--out"); a = p.parse_args()
    if a.file and a.split != [0]: p.error("--file names a whole-kernel variant; --split is the package's walked kernel")
    os.environ.pop("TRITON_INTERPRET", None)                 # the interpreter would replace @triton.jit
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from common import emit
    if a.file:
        spec = importlib.util.spec_from_file_location("variant", a.file)
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    else:
        from mamba3_lite.ssd.triton import chunk_scan as mod
    from mamba3_lite.ssd.triton import chunk_walk
    rows = []
    for split in a.split:
        kernel = chunk_walk.bwd_chunk_walk_kernel if split else mod.bwd_chunk_kernel
        for has_lo, w, cap in ((lo, w, cap) for lo in a.has_lo for w in a.warps for cap in a.maxnreg):
            cx = {**CONSTEXPRS, "HAS_LO": bool(has_lo), **({"SPLIT": split} if split else {})}
            rows.append({"kernel": kernel.__name__, "split": split or None, "arch": f"sm_{a.arch}", "warps": w,
                         "stages": a.stages, "maxnreg": cap or None, "has_lo": bool(has_lo),
                         "file": a.file or ("mamba3_lite/ssd/triton/" + ("chunk_walk.py" if split else "chunk_scan.py")),
                         **resources(kernel, a.arch, w, a.stages, constexprs=cx, maxnreg=cap or None)})
            print(rows[-1], flush=True)
    if a.others:
        from mamba3_lite.ssd.triton import chunk_scan, chunk_state
        for kernel, cx, f32, w, st, cap in OTHERS(chunk_scan, chunk_state):
            for has_lo in a.has_lo:
                rows.append({"kernel": kernel.__name__, "arch": f"sm_{a.arch}", "warps": w, "stages": st, "maxnreg": cap,
                             "has_lo": bool(has_lo), **resources(kernel, a.arch, w, st, {**cx, "HAS_LO": bool(has_lo)},
                                                                 f32, cap)})
                print(rows[-1], flush=True)
    emit(rows, None, a.out, constexprs=CONSTEXPRS)


if __name__ == "__main__":
    main()
