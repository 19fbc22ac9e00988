"""Register caps and pipeline stages for the SSD's three heaviest Triton kernels at the 434M model's training shape
(B=16, T=2048, H=16, complex N=64 -> M=128, D=64, chunk 64, bf16): 05c's one-kernel backward (`bwd_chunk_kernel`,
through `scan_backward_chunk` with the rotation), 05c's forward output (`scan_fwd_kernel`, `scan_y`) and 05b's reverse
state pass (`state_bwd_kernel`). A register cap (`maxnreg`, a Triton launch option passed to ptxas) trades spills for
more programs per SM. Every configuration is timed in `--rounds` interleaved rounds (CUDA events, median of 20 calls a
round; the figure is the median over rounds, so drift between rounds hits every configuration alike), with its
registers and spills as compiled, and its outputs against the default launch's (max |diff| / max |ref|). Prints one JSON
record; on a CPU it refuses (nothing to time).

    python benchmarks/bench_kernel_regs.py --out benchmarks/results/kernel_regs_h200.json
"""
import argparse, json, statistics, sys

import torch


class Capped:
    "A stand-in for a @triton.jit kernel in its module that adds launch options (e.g. maxnreg) to every launch."
    def __init__(self, kernel, **options): self.kernel, self.options = kernel, options
    def __getitem__(self, grid):
        launch = self.kernel[grid]
        def run(*args, **kw):
            self.last = launch(*args, **kw, **self.options)
            return self.last
        return run


def compiled_info(compiled) -> dict:
    "Registers, spills and shared memory of a compiled kernel, where this Triton exposes them."
    meta = getattr(compiled, "metadata", None)
    return {"n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None),
            "shared_bytes": getattr(meta, "shared", None)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3); p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_kernel_regs: needs a CUDA GPU")
    from common import cuda_event_ms as timed, emit, rel_diff as rel, scan_backward_inputs
    from mamba3_lite.ssd.triton import chunk_scan, chunk_state
    from mamba3_lite.ssd.triton.real_ssd import TUNE, state_blocks
    Bsz, T, H, M, D, Q = 16, 2048, 16, 128, 64, 64
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(Bsz, T, H, M, D, Q)
    theta = torch.rand(Bsz, T, H, device="cuda", generator=g) * 6.28
    cos, sin = theta.cos(), theta.sin()
    sb = state_blocks(TUNE)

    def bwd_chunk(stages):
        return lambda: chunk_scan.scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16,
                                                      num_warps=TUNE["warps_chunk"], num_stages=stages)
    def scan_fwd(stages):
        return lambda: (chunk_scan.scan_y(q, k, x, alpha, states, Q, BC=TUNE["BC"], BD=TUNE["BD_scan"],
                                          num_warps=TUNE["warps_scan"], num_stages=stages),)
    def state_bwd(stages):
        return lambda: chunk_state.states_backward(q, dy, alpha, None, Q, torch.bfloat16, **{**sb, "num_stages": stages})

    kernels = {"bwd_chunk_kernel": (chunk_scan, bwd_chunk, (1, 2), (None, 232, 200, 168, 128)),
               "scan_fwd_kernel": (chunk_scan, scan_fwd, (1, 2), (None, 168, 128)),
               "state_bwd_kernel": (chunk_state, state_bwd, (2, 3), (None, 128))}
    flat = lambda res: [t for r in res for t in (r if isinstance(r, (tuple, list)) else (r,)) if torch.is_tensor(t)]
    configs, refs = [], {}
    for name, (module, make, stage_opts, caps) in kernels.items():
        original = getattr(module, name)
        refs[name] = flat(make(stage_opts[0])())
        for stages in stage_opts:
            for cap in caps:
                configs.append(dict(kernel=name, stages=stages, maxnreg=cap, module=module, original=original, make=make, times=[]))
    for rnd in range(a.rounds):
        for c in configs:
            capped = Capped(c["original"], **({"maxnreg": c["maxnreg"]} if c["maxnreg"] else {}))
            setattr(c["module"], c["kernel"], capped)
            try:
                fn = c["make"](c["stages"])
                if rnd == 0:
                    c["rel_diff"] = max(rel(u, v) for u, v in zip(flat(fn()), refs[c["kernel"]]))
                    c["compiled"] = compiled_info(getattr(capped, "last", None))
                c["times"].append(timed(fn))
            except Exception as e:                                       # a cap ptxas refuses, out of resources
                c["error"] = str(e)[:200]
            finally:
                setattr(c["module"], c["kernel"], c["original"])
    rows = []
    for c in configs:
        row = {k: c.get(k) for k in ("kernel", "stages", "maxnreg", "compiled", "rel_diff", "error")}
        if c["times"]: row.update(ms=round(statistics.median(c["times"]), 4), ms_rounds=[round(t, 4) for t in c["times"]])
        rows.append(row); print(json.dumps(row), flush=True)
    out = {"shape": dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16"), "tune": dict(TUNE), "rounds": a.rounds,
           "rows": sorted(rows, key=lambda r: (r["kernel"], r.get("ms", 1e9)))}
    emit(out, device=torch.device("cuda"), out=a.out, benchmark="kernel_register_caps")


if __name__ == "__main__":
    main()
