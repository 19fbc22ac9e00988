"""Launch parameters of chapter 05b's two state passes, each on its own: the forward pass (`states_forward`) and the
reverse pass (`states_backward`) timed over every combination of tiles, warps and stages at the 434M model's training
shape (B=16, T=2048, H=16, complex N=64 -> M=128, D=64, chunk 64, bf16; `--batch 4 --seq 8192` for the long run's: a
quarter of the (batch, head) pairs, each walking four times the chunks; `--batch 8` for the a100 preset's micro-batch),
as a training step queues them (20 calls back to back between two CUDA events, the median of `--rounds`). Each pass's
`current` launch is what the package runs at that shape on this GPU (05d's `state_blocks`: the wide tiles, each pass's
few-pairs tiles or the narrow ones, by the (batch, head) pairs), and each result is compared with that launch's:
tiles in M and D do not change a tile's sum over the chunk, so anything but 0 is a difference worth reading.
Prints one JSON record: the rows sorted by time, the fastest of each pass, and the bytes each pass moves. An experiment.
(Before 2026-12-03, late, `current` was TUNE's narrow tiles for both passes, whatever the package ran.)

    python benchmarks/exp_state_tiles.py --out benchmarks/results/state_tiles_h200.json
    python benchmarks/exp_state_tiles.py --batch 4 --seq 8192 --out benchmarks/results/state_tiles_8192_h200.json
    python benchmarks/exp_state_tiles.py --passes backward --near     # one pass, the 12 launches near the package's
"""
import itertools

import torch

from common import emit, scan_backward_inputs, sweep_cli, sweep_launches


def main():
    a, s = sweep_cli(__doc__, "exp_state_tiles", extra=lambda p: (
        p.add_argument("--passes", choices=("forward", "backward", "both"), default="both"),
        p.add_argument("--near", action="store_true", help="only the tiles near the package's: BM 32 or 64, BD 64, 4 or 8 warps, 2-4 stages")))
    from mamba3_lite.ssd.triton.phases import device_capability
    from mamba3_lite.ssd.triton.real_ssd import batch_head_pairs, state_blocks, tune_for
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    q, k, x, dy, alpha, states, dstates, _ = scan_backward_inputs(*s.values())
    Q, tune, pairs = s["Q"], tune_for(device_capability(q)), batch_head_pairs(q)
    current = {name: state_blocks(tune, pairs, backward=name == "backward") for name in ("forward", "backward")}
    grid = [dict(BM=bm, BD=bd, num_warps=w, num_stages=st)
            for bm, bd, w, st in itertools.product((16, 32, 64, 128), (32, 64), (2, 4, 8), (1, 2, 3, 4))]
    if a.near: grid = [g for g in grid if g["BM"] in (32, 64) and g["BD"] == 64 and g["num_warps"] > 2 and g["num_stages"] > 1]
    passes = {"forward": lambda **kw: states_forward(k, x, alpha, None, Q, **kw),
              "backward": lambda **kw: states_backward(q, dy, alpha, None, Q, states.dtype, **kw)}
    passes = {n: fn for n, fn in passes.items() if a.passes in (n, "both")}
    swept = sweep_launches({n: (fn, current[n], grid) for n, fn in passes.items()}, a.rounds, label="pass")
    el = lambda t: t.numel() * t.element_size()
    moved = {n: b for n, b in {"forward": el(k) + el(x) + el(states), "backward": el(q) + el(dy) + el(dstates)}.items() if n in passes}
    best, now = swept["fastest"], swept["at_current"]
    emit({"shape": {**s, "dtype": "bf16"}, "current": current, "bytes_moved": moved, **swept,
          "tb_per_s": {n: {"current": round(moved[n] / now[n]["ms"] / 1e9, 2), "fastest": round(moved[n] / best[n]["ms"] / 1e9, 2)}
                       for n in moved}}, device="cuda", out=a.out, benchmark="state_pass_tiles")


if __name__ == "__main__":
    main()
