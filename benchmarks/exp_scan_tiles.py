"""Launch parameters of chapter 05c's two heaviest kernels, timed as a training step queues them. The forward output
kernel (`scan_y`: rows per block, D tile, warps, stages, register cap) and the one-kernel backward
(`scan_backward_chunk` with the rotation's transpose: warps, stages) were tuned by sweeps that timed one call at a time
between CUDA events (`bench_tune_scan.py`, `bench_kernel_regs.py`, `bench_bwd_chunk.py`), whose rounds spread by up to
15%; `exp_state_tiles.py` found that the state passes' tiles chosen that way were not the fastest once calls were queued
back to back. This sweep re-times these two kernels the queued way (20 calls between two CUDA events, the median of
`--rounds`) at the 434M model's training shape (B=16, T=2048, H=16, complex N=64 -> M=128, D=64, chunk 64, bf16;
`--batch 4 --seq 8192` for the long run's), each result compared with the current launch's (max |diff| / max |ref|).
Prints one JSON record, rows sorted by time. An experiment. (The D tile stays whole, 64: a first run that also tried 32
stopped at an illegal memory access in `scan_y` under triton 3.6 on the H200, which leaves the CUDA context unusable.)

    python benchmarks/exp_scan_tiles.py --out benchmarks/results/scan_tiles_h200.json
"""
import itertools

import torch

from common import emit, flat_tensors, scan_backward_inputs, sweep_cli, sweep_launches


def main():
    a, s = sweep_cli(__doc__, "exp_scan_tiles")
    from mamba3_lite.ssd.triton.phases import device_capability
    from mamba3_lite.ssd.triton.real_ssd import scan_y_blocks, tune_for
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk, scan_y
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(*s.values())
    theta = torch.rand(a.batch, a.seq, s["H"], device="cuda", generator=g) * 6.28
    cos, sin, Q = theta.cos(), theta.sin(), s["Q"]
    tune = tune_for(device_capability(q))

    def bwd_chunk(**kw):
        "The one kernel's outputs, flat: the four gradients of B and C, dx, dalpha's three pieces, dtheta."
        out = scan_backward_chunk(q, k, x, dy, alpha, states, dstates, Q, cos, sin, torch.bfloat16, end_terms_apart=True, **kw)
        return flat_tensors(out)

    forms = {
        "scan_y": (lambda **kw: (scan_y(q, k, x, alpha, states, Q, **kw),), scan_y_blocks(tune),
                   [dict(BC=bc, BD=bd, num_warps=w, num_stages=st, maxnreg=r) for bc, bd, w, st, r in
                    itertools.product((32, 64), (64,), (4, 8), (1, 2, 3), (None, 168))]),
        "bwd_chunk": (bwd_chunk, dict(num_warps=tune["warps_chunk"], num_stages=tune["stages_chunk"]),
                      [dict(num_warps=w, num_stages=st) for w, st in itertools.product((4, 8), (1, 2))])}
    emit({"shape": {**s, "dtype": "bf16"}, **sweep_launches(forms, a.rounds)},
         device="cuda", out=a.out, benchmark="scan_kernel_tiles")


if __name__ == "__main__":
    main()
