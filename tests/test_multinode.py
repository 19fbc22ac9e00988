"""A multi-node launch on one CPU machine: two torchrun "nodes" (one process each, gloo) meeting at a c10d rendezvous
on 127.0.0.1 train exactly like one process with the same global batch — the launch the README documents for
several machines (`--nnodes`, `--rdzv_backend c10d`, `--rdzv_endpoint`).
"""
import json, lzma, os, socket, subprocess, sys
from pathlib import Path

import torch

from mamba3_lite.data.shards import write_shard
from mamba3_lite.model import ModelConfig
from mamba3_lite.train.config import TrainingConfig
from mamba3_lite.train.export import from_pretrained
from mamba3_lite.train.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]
MODEL = dict(vocab_size=256, max_seq_len=32, d_model=32, n_layers=2, n_heads=2, head_dim=16, state_dim=8, chunk_size=16,
             ffn_dim=64, grad_checkpoint=False)


def _free_port() -> int:
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _config(tmp: Path, name: str, batch_size: int) -> Path:
    "A 6-step tiny run on Shakespeare as bytes; returns the config file."
    data = tmp / "data"
    if not data.exists():
        data.mkdir(parents=True)
        with lzma.open(REPO / "mamba3_lite" / "assets" / "shakespeare.jsonl.xz", "rt") as f:
            text = json.loads(f.readline())["text"].encode()[:66_000]
        write_shard(data / "train_000000.bin", list(text[:60_000]), 256)
        write_shard(data / "val_000000.bin", list(text[60_000:]), 256)
    cfg = TrainingConfig(model=ModelConfig(**MODEL), data_path=str(data), checkpoint_dir=str(tmp / name), batch_size=batch_size,
                         gradient_accumulation_steps=2, max_steps=6, warmup_steps=2, lr=3e-3, save_every=3, log_every=1,
                         eval_every=0, sample_tokens=0, keep_last=2, device="cpu")
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(cfg.to_dict()))
    return path


def _result(ck: Path):
    losses = [r["loss"] for r in read_metrics(ck / "metrics.jsonl") if r["kind"] == "train"]
    return losses, {k: v.detach().clone() for k, v in from_pretrained(ck / "final").state_dict().items()}


def test_two_local_nodes_equal_one_process(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    one = subprocess.run([sys.executable, "-m", "mamba3_lite.pretrain", "--config", str(_config(tmp_path, "one", 4))],
                         capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
    cfg, port = _config(tmp_path, "two", 2), _free_port()
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "m3l-test", "-m", "mamba3_lite.pretrain", "--config", str(cfg)]
    nodes = [subprocess.Popen(node, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in nodes]
    assert all(p.returncode == 0 for p in nodes), "\n----\n".join(o[-2000:] for o in outs)
    (l1, p1), (l2, p2) = _result(tmp_path / "one"), _result(tmp_path / "two")
    assert len(l1) == len(l2) == 6
    # the same per-token losses summed in a different order (fp32): ~1e-6 relative; weights after 6 AdamW steps ~1e-5
    torch.testing.assert_close(torch.tensor(l2), torch.tensor(l1), rtol=1e-5, atol=1e-5)
    for k in p1: torch.testing.assert_close(p2[k], p1[k], rtol=1e-4, atol=2e-5, msg=lambda m: f"{k}: {m}")
