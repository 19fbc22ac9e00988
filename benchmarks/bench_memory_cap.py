"""A preset on a smaller GPU's memory: cap this process's CUDA memory (`torch.cuda.set_per_process_memory_fraction`) and
run `python -m mamba3_lite.pretrain` in it, then report the peak memory and the headroom under the cap.

This is how the `a100` preset is proven to fit an 80 GB A100 on a 141 GB H200 (issue 16):

    ENABLE_TRITON_KERNELS=1 python benchmarks/bench_memory_cap.py --cap-gb 80 \
        --out benchmarks/results/a100_preset_80gb_cap_h200.json -- \
        --preset a100 --model.ssd_dispatch triton --max_steps 20 --log_every 2 --checkpoint_dir /tmp/a100run

Everything after `--` goes to the pretrain CLI unchanged (`mamba3_lite.pretrain.main`, in this process, after the cap
is set). The cap is in bytes (80 GB = 80e9 B = 74.5 GiB, below an A100 80GB's 80 GiB of HBM2e, so a pass here is
conservative); the caching allocator raises out-of-memory above it, and the CLI then exits 1. The cap binds PyTorch's
allocator only: the CUDA context (about 0.5 GiB) comes on top on any GPU. Prints one JSON record (benchmarks/common.py):
exit code, peak allocated and reserved bytes (`torch.cuda.max_memory_allocated` / `max_memory_reserved`), headroom,
and the run's tokens/s from its metrics.jsonl (H200 speed, not an A100's).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from common import emit


def last_train_record(checkpoint_dir: str):
    "The last `kind: train` line of the run's metrics.jsonl (the run may have moved to `<dir>-2`: the newest such folder)."
    cands = sorted(Path(checkpoint_dir).parent.glob(Path(checkpoint_dir).name + "*/metrics.jsonl"), key=os.path.getmtime)
    if not cands:
        return None
    recs = [json.loads(l) for l in cands[-1].read_text().splitlines() if l.strip()]
    train = [r for r in recs if r.get("kind") == "train"]
    return train[-1] if train else None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap-gb", type=float, default=80.0, help="the memory cap in GB (1e9 bytes)")
    ap.add_argument("--out", help="also write the JSON record here")
    args = ap.parse_args(ours)
    if not torch.cuda.is_available():
        sys.exit("bench_memory_cap.py needs a CUDA GPU")
    dev = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(dev).total_memory
    cap = args.cap_gb * 1e9
    if cap > total:
        sys.exit(f"the cap ({cap:.3g} B) is above this GPU's memory ({total:.3g} B)")
    torch.cuda.set_per_process_memory_fraction(cap / total, dev)
    torch.cuda.reset_peak_memory_stats(dev)
    from mamba3_lite.pretrain import main as pretrain_main
    t0 = time.perf_counter()
    rc = pretrain_main(rest)
    wall = time.perf_counter() - t0
    alloc, reserved = torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev)
    ckpt = rest[rest.index("--checkpoint_dir") + 1] if "--checkpoint_dir" in rest else None
    last = last_train_record(ckpt) if ckpt else None
    gib = lambda b: round(b / 2**30, 2)
    results = dict(exit_code=rc, pretrain_args=rest, ENABLE_TRITON_KERNELS=os.environ.get("ENABLE_TRITON_KERNELS"),
                   cap_bytes=int(cap), cap_gib=gib(cap), gpu_total_bytes=total, memory_fraction=round(cap / total, 4),
                   peak_allocated_bytes=alloc, peak_allocated_gib=gib(alloc),
                   peak_reserved_bytes=reserved, peak_reserved_gib=gib(reserved),
                   headroom_allocated_gib=gib(cap - alloc), headroom_reserved_gib=gib(cap - reserved),
                   wall_s=round(wall, 1), last_train_metrics=last)
    emit(results, device=dev, out=args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
