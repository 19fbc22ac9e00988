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
import argparse, itertools, statistics, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("exp_state_tiles: needs a CUDA GPU (it times kernels)")
    from common import TRAINING_SHAPE, emit, queued_ms, rel_diff, scan_backward_inputs
    from mamba3_lite.ssd.triton.real_ssd import TUNE, state_blocks
    from mamba3_lite.ssd.triton.chunk_state import states_forward, states_backward
    s = dict(TRAINING_SHAPE, Bsz=a.batch, T=a.seq)
    q, k, x, dy, alpha, states, dstates, _ = scan_backward_inputs(*s.values())
    Q = s["Q"]
    passes = {"forward": lambda **kw: states_forward(k, x, alpha, None, Q, **kw),
              "backward": lambda **kw: states_backward(q, dy, alpha, None, Q, states.dtype, **kw)}
    current = state_blocks(TUNE)
    refs = {name: fn(**current) for name, fn in passes.items()}
    rows = []
    for name, fn in passes.items():
        for BM, BD, warps, stages in itertools.product((16, 32, 64, 128), (32, 64), (2, 4, 8), (1, 2, 3, 4)):
            kw = dict(BM=BM, BD=BD, num_warps=warps, num_stages=stages)
            try:
                out = fn(**kw)
                diff = max(rel_diff(o, r) for o, r in zip(out, refs[name]))
                ms = statistics.median(queued_ms(lambda: fn(**kw)) for _ in range(a.rounds))
            except Exception as e:                       # e.g. out of shared memory at many stages: say so, go on
                rows.append({"pass": name, **kw, "error": f"{type(e).__name__}: {str(e)[:160]}"}); continue
            rows.append({"pass": name, **kw, "ms": round(ms, 4), "rel_diff": diff, "current": kw == current})
    ok = sorted((r for r in rows if "ms" in r), key=lambda r: (r["pass"], r["ms"]))
    best = {n: next(r for r in ok if r["pass"] == n) for n in passes}
    now = {n: next(r for r in ok if r["pass"] == n and r["current"]) for n in passes}
    el = lambda t: t.numel() * t.element_size()
    moved = {"forward": el(k) + el(x) + el(states), "backward": el(q) + el(dy) + el(dstates)}
    emit({"shape": {**s, "dtype": "bf16"}, "current": current, "bytes_moved": moved,
          "fastest": best, "at_current": now,
          "tb_per_s": {n: {"current": round(moved[n] / now[n]["ms"] / 1e9, 2), "fastest": round(moved[n] / best[n]["ms"] / 1e9, 2)}
                       for n in passes},
          "rows": ok + [r for r in rows if "error" in r]}, device="cuda", out=a.out, benchmark="state_pass_tiles")


if __name__ == "__main__":
    main()
