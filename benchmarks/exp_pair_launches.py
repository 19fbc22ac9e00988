"""Where chapter 05a's hi + lo pair costs time, and whether a launch choice made before it won that time back. The
H200's launch parameters of the forward scan (`TUNE_BY_CAPABILITY[(9, 0)]`: 05c's `scan_y` with one stage and a cap of
168 registers a thread; 05b's state pass with `state_wide` tiles from 256 (batch, head) pairs, `state_few_forward` up
to 64) were measured with one fp32 alpha. This script, at the 434M model's micro-batch (B=16, T=2048, or `--batch 4
--seq 8192`), H=16, complex N=64 -> M=128, D=64, chunk 64, bf16, decays of the model's initial sizes:

1. times each scan kernel the training step runs with the pair and with alpha alone (`alpha_lo=None`, the kernels
   compiled without `HAS_LO`) at the current launch: `states_forward`, `scan_y`, and the backward's reverse state pass
   plus 05c's one-kernel backward (`scan_backward_rotated`);
2. sweeps `scan_y`'s, the forward state pass's and 05c's one-kernel backward's launch parameters with the pair
   (`common.sweep_launches`: median of `--rounds` timings as a training step queues the kernel, outputs against the
   current launch's; `--only NAME` sweeps one of them). `scan_y`'s D tile stays whole (64): a sweep that also tried 32
   stopped at an illegal memory access under triton 3.6 on an H100 (2026-12-05), as `exp_scan_tiles.py`'s did on the
   H200 (a D tile of 32 is exact on Triton's interpreter), and that leaves the CUDA context unusable.

Prints one JSON record (`--out` also writes it); `--tune-out` writes the launches at least 1% faster than the current
ones as `TUNE` entries (no file if none), for an A/B of the real CLI: `bench_cli.py --tune "$(cat FILE)"`;
`--no-sweep` stops after step 1. Refuses on a CPU.

    python benchmarks/exp_pair_launches.py --out benchmarks/results/pair_launches_h200.json
"""
import itertools, json, statistics

import torch

from common import emit, flat_tensors, pair_scan_inputs, queued_ms, sweep_cli, sweep_launches


def main():
    def extra(p):
        p.add_argument("--tune-out"); p.add_argument("--no-sweep", action="store_true", help="step 1 only")
        p.add_argument("--only", choices=("scan_y", "states_forward", "bwd_chunk"), help="sweep this kernel alone")
    a, s = sweep_cli(__doc__, "exp_pair_launches", extra)
    from mamba3_lite.ssd.triton.phases import device_capability
    from mamba3_lite.ssd.triton.chunk_state import states_backward, states_forward
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk, scan_y
    from mamba3_lite.ssd.triton.real_ssd import (batch_head_pairs, scan_backward_rotated, scan_y_blocks, state_blocks,
                                                 tune_for)
    Bsz, T, H, M, D, Q = s["Bsz"], s["T"], s["H"], s["M"], s["D"], s["Q"]
    i = pair_scan_inputs(Bsz, T, H, M // 2, D, Q)              # exp_alpha_pair.py's inputs
    alpha, alpha_lo, cos, sin, q, k, x, dy = (i[n] for n in "alpha alpha_lo cos sin q k x dy".split())
    tune = tune_for(device_capability(x))
    st_kw, sy_kw = state_blocks(tune, batch_head_pairs(k)), scan_y_blocks(tune)
    states = states_forward(k, x, alpha, None, Q, **st_kw, alpha_lo=alpha_lo)[0]
    med = lambda fn: round(statistics.median(queued_ms(fn) for _ in range(a.rounds)), 4)
    split = {}
    for form, lo in (("pair", alpha_lo), ("alpha alone", None)):
        split[form] = dict(
            states_forward=med(lambda: states_forward(k, x, alpha, None, Q, **st_kw, alpha_lo=lo)),
            scan_y=med(lambda: scan_y(q, k, x, alpha, states, Q, **sy_kw, alpha_lo=lo)),
            backward=med(lambda: scan_backward_rotated(q, k, x, alpha, None, Q, dy, None, cos, sin, torch.bfloat16,
                                                       states, tune, alpha_lo=lo)))
        print(json.dumps({form: split[form]}), flush=True)
    shape = dict(B=Bsz, T=T, H=H, M=M, D=D, Q=Q, dtype="bf16")
    if a.no_sweep:
        return emit({"shape": shape, "pair_vs_alone_ms": split}, device=torch.device("cuda"), out=a.out,
                    benchmark="pair_launches")
    scan_grid = [dict(BC=64, BD=64, num_warps=w, num_stages=st, maxnreg=mr)
                 for w, st, mr in itertools.product((4, 8), (1, 2, 3), (168, None))]
    state_grid = [dict(BM=bm, BD=64, num_warps=w, num_stages=st)
                  for bm, w, st in itertools.product((32, 64), (4, 8), (2, 3, 4))]
    chunk_grid = [dict(num_warps=w, num_stages=st) for w, st in itertools.product((4, 8), (1, 2))]
    dstates = states_backward(q, dy, alpha, None, Q, states.dtype, **st_kw)[0]

    def bwd_chunk(**kw):
        "05c's one-kernel backward with the pair, its outputs flat."
        out = scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16, end_terms_apart=True,
                                  alpha_lo=alpha_lo, **kw)
        return flat_tensors(out)

    forms = {"scan_y": (lambda **kw: (scan_y(q, k, x, alpha, states, Q, **kw, alpha_lo=alpha_lo),), sy_kw, scan_grid),
             "states_forward": (lambda **kw: states_forward(k, x, alpha, None, Q, **kw, alpha_lo=alpha_lo), st_kw,
                                state_grid),
             "bwd_chunk": (bwd_chunk, dict(num_warps=tune["warps_chunk"], num_stages=tune["stages_chunk"]), chunk_grid)}
    sweep = sweep_launches({n: f for n, f in forms.items() if a.only in (None, n)}, rounds=a.rounds, label="kernel")
    for n in sweep["fastest"]:
        print(n, "current", json.dumps(sweep["at_current"][n]), "fastest", json.dumps(sweep["fastest"][n]), flush=True)
    faster = lambda n: (sweep["at_current"].get(n) is not None
                        and sweep["fastest"][n]["ms"] < 0.99 * sweep["at_current"][n]["ms"])
    pick = {}                   # launches at least 1% faster than the current ones, as TUNE entries
    if faster("scan_y"):
        fy = sweep["fastest"]["scan_y"]
        pick.update(warps_scan=fy["num_warps"], stages_scan=fy["num_stages"], maxnreg_scan=fy["maxnreg"], BD_scan=fy["BD"])
    if faster("states_forward"):
        key = "state_wide" if st_kw == tune["state_wide"] else "state_few_forward"
        pick[key] = {n: sweep["fastest"]["states_forward"][n] for n in ("BM", "BD", "num_warps", "num_stages")}
    if faster("bwd_chunk"):
        fc = sweep["fastest"]["bwd_chunk"]
        pick.update(warps_chunk=fc["num_warps"], stages_chunk=fc["num_stages"])
    if a.tune_out and pick:
        with open(a.tune_out, "w") as f: json.dump(pick, f)
    emit({"shape": shape, "pair_vs_alone_ms": split, **sweep},
         device=torch.device("cuda"), out=a.out, benchmark="pair_launches")


if __name__ == "__main__":
    main()
