"""The trainer under `compile_mode="reduce-overhead"` (CUDA graphs) on a GPU: gradient accumulation, evaluation and the
end-of-run sample all run, and the losses are those of the default compile mode. CPU runs skip (no CUDA graphs there).
Before `Pretrainer._loss` marked each call as a new CUDA-graph step, the second micro-batch's backward failed with
"accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"."""
import math

import pytest
import torch

from mamba3_lite.train.metrics import read_metrics
from mamba3_lite.train.trainer import Pretrainer
from test_training import tiny_cfg

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _losses(tmp_path, mode):
    cfg = tiny_cfg(tmp_path / mode, device="cuda", compile_model=True, compile_mode=mode, max_steps=6, eval_every=3,
                   save_every=6, sample_tokens=8, gradient_accumulation_steps=2)
    t = Pretrainer(cfg, progress=False)
    try: out = t.train()
    finally: t.close()
    records = read_metrics(tmp_path / mode / "ck" / "metrics.jsonl")
    return out["losses"], [r["val_loss"] for r in records if r["kind"] == "eval"]


def test_reduce_overhead_trains_like_the_default_mode(tmp_path):
    torch._dynamo.reset()
    base, base_val = _losses(tmp_path, "default")
    torch._dynamo.reset()
    graphs, graphs_val = _losses(tmp_path, "reduce-overhead")
    assert len(graphs) == 6 and len(graphs_val) == 2 and all(math.isfinite(v) for v in graphs + graphs_val)
    for a, b in zip(graphs + graphs_val, base + base_val): assert abs(a - b) <= 1e-4 * abs(b), (graphs, base)
