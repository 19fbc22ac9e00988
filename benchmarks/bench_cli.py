"""Training speed as a user sees it: `python -m mamba3_lite.pretrain` itself, run once per sequence length.

Each run is the real CLI (the `h200` preset unless `--preset` says otherwise, the Triton opt-in, the built-in corpus
unless `--data_path` is given) writing its own `metrics.jsonl`; the figure is the median `tok_s` of the train records
after the first (which holds the compile), and the GPU memory the run reserved (`mem_gb`); `clocks` is the card's mean
SM clock and power over those records' windows (`common.ClockLog`: at the H200's power cap the clock differs by card).
The CLI counts training steps only: the evaluation at the end, the checkpoint and the sample run, outside its clock. Prints one JSON record (machine, command, date), like every script here.

    python benchmarks/bench_cli.py --runs 2048x16 8192x4 --out benchmarks/results/cli_h200.json

Two versions of the package in one lease (cards differ by ~1.5%, so an A/B belongs in one lease): unpack the other
commit's package beside the tree and point the runs at it, from benchmarks/ (`python -m` puts the current directory
first on the path, and the repository root holds the working tree's package), e.g.
    mkdir .old && git archive <commit> mamba3_lite | tar -x -C .old      # untracked: a device run carries it
    cd benchmarks
    PYTHONPATH=$PWD/../.old python bench_cli.py --runs 2048x16 --steps 16 --out before.json
    PYTHONPATH=$PWD/.. python bench_cli.py --runs 2048x16 --steps 16 --out after.json      # the working tree's
Each package location compiles into its own Inductor cache (`inductor_cache_env`, unless TORCHINDUCTOR_CACHE_DIR is
set): a compiled graph's cache key does not cover a custom op's own code, so a package whose ops changed would
otherwise load the other's graph and fail (seen 2026-12-06: `assert_size_stride ... ssd_real_packed_fwd`).

A launch setting of the Triton kernels against the package's own, without a package to edit: `--tune JSON` updates
05d's `TUNE` (and any `TUNE_BY_CAPABILITY` entry of the same name) in the CLI's process before it starts, e.g.
    python bench_cli.py --runs 2048x16 --tune '{"walk_split": 4, "walk_maxnreg": 168}' --out walked.json
The record carries the override (`tune`); the command it shows is then `python -c <TUNE_WRAPPER> JSON <the CLI's args>`.
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ClockLog, emit


# `python -c` this, then the override as JSON, then the CLI's arguments: `python -m mamba3_lite.pretrain` with 05d's
# launch settings updated first (the kernels' launchers read them at every call)
TUNE_WRAPPER = """import json, runpy, sys
from mamba3_lite.ssd.triton import real_ssd
override = json.loads(sys.argv.pop(1))
unknown = sorted(set(override) - set(real_ssd.TUNE))
if unknown: sys.exit(f"--tune: not a TUNE entry: {', '.join(unknown)}")
real_ssd.TUNE.update(override)
for entry in real_ssd.TUNE_BY_CAPABILITY.values(): entry.update({k: v for k, v in override.items() if k in entry})
print(f"TUNE override: {override}", file=sys.stderr)
sys.argv[0] = "mamba3_lite.pretrain"
runpy.run_module("mamba3_lite.pretrain", run_name="__main__", alter_sys=True)"""


def inductor_cache_env(env: dict) -> dict:
    """TORCHINDUCTOR_CACHE_DIR for a CLI run in `env`: the one set there, else a folder in the temp dir named by where
    that environment imports `mamba3_lite` from (found without importing it): two packages never share a graph."""
    if env.get("TORCHINDUCTOR_CACHE_DIR"): return {}
    find = "import importlib.util as u; print(u.find_spec('mamba3_lite').origin)"
    where = subprocess.run([sys.executable, "-c", find], env=env, capture_output=True, text=True).stdout.strip()
    tag = hashlib.sha1(os.path.dirname(where).encode()).hexdigest()[:12]
    return {"TORCHINDUCTOR_CACHE_DIR": os.path.join(tempfile.gettempdir(), f"torchinductor_mamba3_lite_{tag}")}


def run_cli(seq: int, batch: int, steps: int, log_every: int, preset: str, extra: list[str], workdir: Path,
            tune: dict | None = None) -> dict:
    "One CLI run; its train records, wall time and last lines. `tune`: 05d's TUNE entries to override (TUNE_WRAPPER)."
    ckpt = workdir / f"ck_{seq}x{batch}"
    launch = ["-c", TUNE_WRAPPER, json.dumps(tune)] if tune else ["-m", "mamba3_lite.pretrain"]
    cmd = [sys.executable, *launch, "--preset", preset, "--model.ssd_dispatch", "triton",
           "--model.max_seq_len", str(seq), "--batch_size", str(batch), "--max_steps", str(steps),
           "--log_every", str(log_every), "--eval_every", str(steps), "--eval_batches", "2", "--save_every", str(steps), "--sample_tokens", "8",
           "--checkpoint_dir", str(ckpt), *extra]
    env = {**os.environ, "ENABLE_TRITON_KERNELS": "1"}
    env.update(inductor_cache_env(env))
    t0 = time.perf_counter()
    with ClockLog() as clocks:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    shown = ["-c", "<TUNE_WRAPPER>", json.dumps(tune), *cmd[4:]] if tune else cmd[1:]
    out = {"seq": seq, "batch": batch, "command": "ENABLE_TRITON_KERNELS=1 python " + " ".join(shown),
           "returncode": proc.returncode, "wall_s": round(wall, 1), "inductor_cache": env["TORCHINDUCTOR_CACHE_DIR"],
           **({"tune": tune} if tune else {})}
    if proc.returncode != 0:
        return {**out, "stderr_tail": proc.stderr[-2000:]}
    records = [json.loads(l) for l in (ckpt / "metrics.jsonl").read_text().splitlines() if l.strip()]
    train = [r for r in records if r["kind"] == "train"]
    steady = [r["tok_s"] for r in train[1:]] or [train[-1]["tok_s"]]
    return {**out, "tokens_per_step": train[-1]["tokens"] // train[-1]["step"], "tok_s_windows": steady,
            "tokens_per_s": round(statistics.median(steady)), "mfu": train[-1]["mfu"],
            "peak_reserved_gb": train[-1].get("mem_gb"), "clocks": clocks.between(train[0]["time"], train[-1]["time"]),
            "loss_first_last": [round(train[0]["loss"], 3), round(train[-1]["loss"], 3)]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", default=["2048x16", "8192x4"], help="SEQxBATCH per run (micro-batch per step)")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--log_every", type=int, default=4)
    p.add_argument("--preset", default="h200")
    p.add_argument("--out")
    p.add_argument("--tune", type=json.loads, help="05d's TUNE entries to override in the CLI's process, as JSON")
    a, extra = p.parse_known_args()                  # anything else goes to the CLI as it is
    import torch
    device, results = "cuda" if torch.cuda.is_available() else None, []
    with tempfile.TemporaryDirectory() as tmp:
        for i, spec in enumerate(a.runs):
            seq, batch = (int(v) for v in spec.lower().split("x"))
            results.append(run_cli(seq, batch, a.steps, a.log_every, a.preset, extra, Path(tmp), a.tune))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            if a.out and i + 1 < len(a.runs):      # a run cut off later still leaves the finished ones in --out
                emit(results, device=device, out=a.out, echo=False, benchmark="cli_training_speed", runs_done=f"{i + 1} of {len(a.runs)}")
    emit(results, device=device, out=a.out, benchmark="cli_training_speed")


if __name__ == "__main__":
    main()
