"Small helpers the benchmark scripts share (each script runs from a checkout: `python benchmarks/NAME.py`)."
import platform

import torch


def cpu_name() -> str:
    "The CPU model from /proc/cpuinfo where there is one."
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def sync(device):
    "Wait for the device's queued work, so that wall-clock timings are honest."
    if device.type == "cuda":
        torch.cuda.synchronize(device)
