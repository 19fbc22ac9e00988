"""Launch parameters of chapter 05b's two state passes, each on its own. The package runs the forward pass
(`states_forward`) and the reverse pass (`states_backward`) with one set of tiles, warps and stages (05d's TUNE: 32x64,
4 warps, 3 stages), chosen for the forward; this sweep times each pass over every combination at the 434M model's
training shape (B=16, T=2048, H=16, complex N=64 -> M=128, D=64, chunk 64, bf16; `--batch 4 --seq 8192` for the long
run's: a quarter of the (batch, head) pairs, each walking four times the chunks), as a training step queues them
(20 calls back to back between two CUDA events, the median of `--rounds`), and compares each result with TUNE's:
tiles in M and D do not change a tile's sum over the chunk, so anything but 0 is a difference worth reading.
Prints one JSON record: the rows sorted by time, the fastest of each pass, and the bytes each pass moves. An experiment.

    python benchmarks/exp_state_tiles.py --out benchmarks/results/state_tiles_h200.json
    python benchmarks/exp_state_tiles.py --batch 4 --seq 8192 --out benchmarks/results/state_tiles_8192_h200.json
"""
import itertools

import torch

from common import emit, scan_backward_inputs, sweep_cli, sweep_launches


def main():
    a, s = sweep_cli(__doc__, "exp_state_tiles")
    from mamba3_lite.ssd.triton.real_ssd import TUNE, state_blocks
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    q, k, x, dy, alpha, states, dstates, _ = scan_backward_inputs(*s.values())
    Q, current = s["Q"], state_blocks(TUNE)
    grid = [dict(BM=bm, BD=bd, num_warps=w, num_stages=st)
            for bm, bd, w, st in itertools.product((16, 32, 64, 128), (32, 64), (2, 4, 8), (1, 2, 3, 4))]
    swept = sweep_launches({"forward": (lambda **kw: states_forward(k, x, alpha, None, Q, **kw), current, grid),
                            "backward": (lambda **kw: states_backward(q, dy, alpha, None, Q, states.dtype, **kw), current, grid)},
                           a.rounds, label="pass")
    el = lambda t: t.numel() * t.element_size()
    moved = {"forward": el(k) + el(x) + el(states), "backward": el(q) + el(dy) + el(dstates)}
    best, now = swept["fastest"], swept["at_current"]
    emit({"shape": {**s, "dtype": "bf16"}, "current": current, "bytes_moved": moved, **swept,
          "tb_per_s": {n: {"current": round(moved[n] / now[n]["ms"] / 1e9, 2), "fastest": round(moved[n] / best[n]["ms"] / 1e9, 2)}
                       for n in moved}}, device="cuda", out=a.out, benchmark="state_pass_tiles")


if __name__ == "__main__":
    main()
