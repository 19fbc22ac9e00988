"""Pretrainer on CPU with tiny configs: bit-identical resume, NaN guard, corrupt checkpoints, refused resumes, DDP/FSDP2 parity.

The data is Shakespeare as bytes (vocab 256) written with `write_shard`, so the model is a few thousand parameters.
"""
import json, lzma, os, shutil, socket, subprocess, sys
from pathlib import Path

import pytest
from unittest import mock
import torch

from mamba3_lite.data.shards import write_shard
from mamba3_lite.model import ModelConfig
from mamba3_lite.train.config import TrainingConfig
from mamba3_lite.train.metrics import read_metrics
from mamba3_lite.train.optim import build_optimizer, skips_on_device
from mamba3_lite.train.export import from_pretrained
from mamba3_lite.train.checkpoint import ResumeError
from mamba3_lite.train.trainer import Pretrainer

torch.set_num_threads(1)      # these models are a few thousand parameters: one thread is ~3x faster than two here
REPO = Path(__file__).resolve().parents[1]
MODEL = dict(vocab_size=256, max_seq_len=32, d_model=32, n_layers=2, n_heads=2, head_dim=16, state_dim=8, chunk_size=16,
             ffn_dim=64, grad_checkpoint=False)


def byte_corpus(folder: Path, n_train: int = 60_000, n_val: int = 6_000) -> Path:
    "Shakespeare's first work as bytes (ids < 256): train/val shards in `folder`."
    folder.mkdir(parents=True, exist_ok=True)
    with lzma.open(REPO / "mamba3_lite" / "assets" / "shakespeare.jsonl.xz", "rt") as f:
        data = json.loads(f.readline())["text"].encode()[: n_train + n_val]
    write_shard(folder / "train_000000.bin", list(data[:n_train]), 256)
    write_shard(folder / "val_000000.bin", list(data[n_train:]), 256)
    return folder


def tiny_cfg(tmp: Path, model: dict | None = None, **kw) -> TrainingConfig:
    "A tiny run on the byte corpus; `model` changes fields of the tiny `ModelConfig`."
    base = dict(data_path=str(byte_corpus(tmp / "data")), checkpoint_dir=str(tmp / "ck"), batch_size=4,
                gradient_accumulation_steps=2, max_steps=12, warmup_steps=3, lr=3e-3, save_every=4, log_every=1, eval_every=4,
                eval_batches=2, sample_tokens=0, keep_last=2, device="cpu")
    return TrainingConfig(model=ModelConfig(**{**MODEL, **(model or {})}), **{**base, **kw})


def train_losses(ck: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(ck / "metrics.jsonl") if r["kind"] == "train"]


def params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_bit_identical(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a: assert torch.equal(a[k], b[k]), f"{k} differs: max |diff| {(a[k] - b[k]).abs().max().item():.3e}"


def test_resume_is_bit_identical(tmp_path):
    full = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "full")))
    out_full = full.train()
    assert out_full["step"] == 12 and out_full["losses"][-1] < out_full["losses"][0]

    first = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "cut")))
    first.train(until_step=6)                        # checkpoint at 4; steps 5-6 are lost as in a crash
    del first
    resumed = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "cut"), resume="auto"))
    assert resumed.step == 4
    resumed.train()
    assert train_losses(tmp_path / "cut") == train_losses(tmp_path / "full") == out_full["losses"]
    assert_bit_identical(params(resumed.model), params(full.model))
    assert_bit_identical(resumed.optimizer.state_dict()["state"][0], full.optimizer.state_dict()["state"][0])
    # the Hugging Face export loads back to the same weights
    assert_bit_identical(params(from_pretrained(tmp_path / "cut" / "final")), params(full.model))
    assert (tmp_path / "cut" / "loss_curve.png").stat().st_size > 1000


class Fused(Pretrainer):
    """A fused AdamW on the CPU (it has those kernels too): the update is queued before the host sync, as on a GPU, so
    `train` queues each next step's first micro-batch before the sync (07g's look-ahead). Records whether it did."""
    def __init__(self, cfg):
        self.queued_ahead = []
        fused = lambda model, cfg, fused=None: build_optimizer(model, cfg, fused=True)
        with mock.patch("mamba3_lite.train.trainer.build_optimizer", fused):    # before a resume loads its state into it
            super().__init__(cfg)
        assert skips_on_device(self.optimizer)

    def train_step(self, **kw):
        out = super().train_step(**kw)
        self.queued_ahead.append(self._ahead is not None)
        assert (out["ahead_s"] > 0) == (self._ahead is not None)     # its queuing time is handed to the next step
        return out


def test_look_ahead_changes_no_number_and_resumes_exactly(tmp_path):
    plain = Fused(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "plain"), eval_every=0))
    losses = [plain.train_step()["loss"] for _ in range(12)]          # called directly: never ahead
    full = Fused(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "full")))
    assert full.train()["losses"] == losses and plain.queued_ahead == [False] * 12
    assert full.queued_ahead == [True] * 11 + [False]                    # not past the run's last step
    assert_bit_identical(params(full.model), params(plain.model))
    cut = Fused(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "cut")))
    cut.train(until_step=6)
    # step 4's checkpoint was written with step 5's first micro-batch queued: it records the data before that batch
    assert torch.load(tmp_path / "cut" / "step_00000004" / "state.pt", weights_only=False)["sampler"]["position"] == 2 * 4
    resumed = Fused(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "cut"), resume="auto"))
    assert resumed.step == 4 and resumed.train()["losses"] == losses[4:]
    assert_bit_identical(params(resumed.model), params(full.model))
    assert_bit_identical(resumed.optimizer.state_dict()["state"][0], full.optimizer.state_dict()["state"][0])


class NanAt(Pretrainer):
    """Returns a NaN loss on the given micro-batch calls (counted across the run, so a rollback does not replay them).
    `fused`: a fused AdamW (a CPU has its kernels too), so the update is queued before the verdict and skipped by the
    optimizer itself, as on a GPU (chapter 07b's `queue_update`)."""
    def __init__(self, cfg, bad_calls, mode="loss", fused=False):
        self.bad_calls, self.calls, self.mode = set(bad_calls), 0, mode
        super().__init__(cfg)
        if fused: self.optimizer = build_optimizer(self.model, self.cfg, fused=True)

    def _loss(self, x, y):
        loss = super()._loss(x, y)
        if not torch.is_grad_enabled(): return loss    # evaluation: not counted
        self.calls += 1
        if self.calls in self.bad_calls:
            return loss * float("nan") if self.mode == "loss" else _InfGrad.apply(loss)
        return loss


class _InfGrad(torch.autograd.Function):
    "Identity forward, infinite gradient backward: a finite loss with a non-finite gradient norm."
    @staticmethod
    def forward(ctx, x): return x.clone()
    @staticmethod
    def backward(ctx, g): return g * float("inf")


@pytest.mark.parametrize("fused", [False, True], ids=["host_decides", "skipped_by_fused_adamw"])
def test_nan_guard_rolls_back_after_5_and_finishes(tmp_path, fused):
    # accumulation 2: optimizer steps 9..13 (1-based) see a NaN loss in their first micro-batch
    bad = {2 * (s - 1) + 1 for s in range(9, 14)}
    t = NanAt(tiny_cfg(tmp_path, max_steps=16), bad, fused=fused)
    assert skips_on_device(t.optimizer) == fused
    out = t.train()
    ev = [r for r in read_metrics(tmp_path / "ck" / "metrics.jsonl") if r["kind"] == "event"]
    # step 12's checkpoint is not written: its loss is NaN (issue 9: nothing is saved after a non-finite step)
    assert [e["event"] for e in ev] == ["nan_skip"] * 4 + ["save_refused", "rollback"], ev
    assert ev[-1]["to_step"] == 8 and "step_00000008" in ev[-1]["message"]     # the newest checkpoint, the last good one
    assert out == {**out, "step": 16, "skipped": 5, "rollbacks": 1}
    # the data kept going: 13 steps, back to 8, 8 more (as a checkpoint records it: the batch drawn ahead for a
    # next step, 06f's Prefetched, is not counted, though the sampler itself has moved past it)
    assert t._batches.sampler_state()["position"] == 2 * (13 + 8) == t.sampler.position - 1
    assert all(torch.isfinite(p).all() for p in t.model.parameters())
    assert Path(out["final"], "model.safetensors").exists()


@pytest.mark.parametrize("fused", [False, True], ids=["host_decides", "skipped_by_fused_adamw"])
def test_nan_grad_norm_is_skipped(tmp_path, fused):
    t = NanAt(tiny_cfg(tmp_path, max_steps=6, eval_every=0), {5}, mode="grad", fused=fused)   # step 3's first micro-batch
    out = t.train(until_step=2); before = params(t.model)
    steps = [s["step"].item() for s in t.optimizer.state.values()]
    m = t.train_step()
    assert m["verdict"] == "skip" and m["loss"] == m["loss"] and not torch.isfinite(torch.tensor(m["grad_norm"]))
    assert_bit_identical(params(t.model), before)     # nothing applied
    assert [s["step"].item() for s in t.optimizer.state.values()] == steps == [2] * len(steps)   # nor counted
    assert t.train()["step"] == 6 and t.guard.skipped == 1


def test_corrupt_checkpoint_falls_back(tmp_path, capsys):
    Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0)).train()       # checkpoints 4 and 8
    f = tmp_path / "ck" / "step_00000008" / "state.pt"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])                  # truncated
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=10, eval_every=0, resume="auto"))
    assert t.step == 4
    assert f"skipping {f}: truncated" in capsys.readouterr().out
    assert t.train()["step"] == 10


def test_checkpoint_moved_aside_by_a_killed_save_is_restored(tmp_path, capsys):
    "A kill between publish_dir's two renames (re-saving an existing step) leaves only `.step_X.old-PID-RAND`: put back."
    Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0)).train()       # checkpoints 4 and 8
    ck = tmp_path / "ck"
    (ck / "step_00000008").rename(ck / ".step_00000008.old-4242-0badc0de")   # the old folder moved aside ...
    (ck / ".tmp-step_00000008-4242").mkdir()                                 # ... the new one not renamed into place yet
    shutil.copytree(ck / "step_00000004", ck / ".step_00000004.old-4242-0badc0de")   # a replaced copy not yet deleted
    capsys.readouterr()
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=10, eval_every=0, resume="auto"))
    out = capsys.readouterr().out
    assert "restored step_00000008 from .step_00000008.old-4242-0badc0de" in out
    assert t.step == 8 and sorted(p.name for p in ck.glob("*step_*")) == ["step_00000004", "step_00000008"]
    assert t.train()["step"] == 10


def test_resume_with_other_model_or_data_is_refused(tmp_path):
    Pretrainer(tiny_cfg(tmp_path, max_steps=4, eval_every=0)).train()
    with pytest.raises(ResumeError, match=r"model\.d_model: 32 -> 64"):
        Pretrainer(tiny_cfg(tmp_path, resume="auto", model={"d_model": 64}))
    with pytest.raises(ResumeError, match=r"model\.max_seq_len: 32 -> 16"):
        Pretrainer(tiny_cfg(tmp_path, resume="auto", model={"max_seq_len": 16}))
    with pytest.raises(ResumeError, match=r"lr: 0\.003 -> 0\.001"):           # issue 9: a new lr needs the user's word
        Pretrainer(tiny_cfg(tmp_path, resume="auto", max_steps=6, lr=1e-3))
    t = Pretrainer(tiny_cfg(tmp_path, resume="auto", max_steps=6, lr=1e-3, model={"grad_checkpoint": True},   # fine to change
                            allow_config_change="lr"))
    assert t.step == 4



def legacy_format(model, opt) -> dict:
    "What the former MultiOptimizer saved for `opt`'s moments: the real groups in one AdamW, the complex A_log's in a second."
    params, sd = dict(model.named_parameters()), opt.state_dict()
    name_of = {id(p): n for n, p in params.items()}
    st = {name_of[id(p)]: sd["state"][i] for g_sd, g in zip(sd["param_groups"], opt.param_groups)
          for i, p in zip(g_sd["params"], g["params"]) if i in sd["state"]}
    cplx = [n for n in params if n.endswith(".A_log")]
    real = [n for n in params if n not in cplx and not n.endswith(".A_imag")]
    hp = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]     # decay, no_decay

    def one(groups, moments):
        names = [n for _, _, ns in groups for n in ns]
        return {"state": {i: moments(n) for i, n in enumerate(names)},
                "param_groups": [{**h, "name": k, "params": [names.index(n) for n in ns]} for k, h, ns in groups]}
    join = lambda n: {**st[n], **{m: torch.complex(st[n][m], st[n[:-5] + "A_imag"][m]) for m in ("exp_avg", "exp_avg_sq")}}
    return {"optimizers": [one([("decay", hp[0], [n for n in real if params[n].dim() >= 2]),
                                ("no_decay", hp[1], [n for n in real if params[n].dim() < 2])], st.__getitem__),
                           one([("complex", hp[1], cplx)], join)]}


def test_two_optimizer_checkpoint_resumes_exactly(tmp_path):
    "A checkpoint in the pre-re-layout format (complex A_log weights, two AdamWs) resumes to the same run, bit for bit."
    from mamba3_lite.train.checkpoint import CheckpointManager
    full = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "full"), max_steps=8, eval_every=0))
    out_full = full.train()
    first = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "cut"), max_steps=8, eval_every=0))
    first.train(until_step=4)                        # checkpoint at 4, rewritten below as the old code wrote it
    cm = CheckpointManager(tmp_path / "cut")
    state = cm.load(cm.path_for(4))
    state["optimizer"] = legacy_format(first.model, first.optimizer)
    for k in [k for k in state["model"] if k.endswith(".A_log")]:
        state["model"][k] = torch.complex(state["model"][k], state["model"].pop(k[:-5] + "A_imag"))
    cm.save(4, state)
    del first
    resumed = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "cut"), max_steps=8, eval_every=0, resume="auto"))
    assert resumed.step == 4
    assert resumed.train()["losses"] == out_full["losses"][4:]
    assert_bit_identical(params(resumed.model), params(full.model))
    with pytest.raises(ResumeError, match=r"refusing to resume from .*step_00000004: the optimizer state is the former two-optimizer"):
        state["optimizer"]["optimizers"].pop()       # the complex A's AdamW lost: refused, naming the checkpoint
        cm.save(4, state); Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "branch"), max_steps=8, resume=str(cm.path_for(4))))


def _free_port() -> int:
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _run_cli(tmp_path, name, nproc, extra):
    "Run the CLI (under torchrun with `nproc` gloo ranks if > 1); return its losses and final weights."
    cfg = tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / name), max_steps=6, save_every=3, eval_every=3).to_dict()
    (tmp_path / f"{name}.json").write_text(json.dumps(cfg))
    launcher = ([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--master_port={_free_port()}"]
                if nproc > 1 else [sys.executable])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    r = subprocess.run(launcher + ["-m", "mamba3_lite.pretrain", "--config", str(tmp_path / f"{name}.json"), *extra],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return train_losses(tmp_path / name), params(from_pretrained(tmp_path / name / "final"))


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_equal_one_rank(tmp_path, parallel, one_rank_run):
    """2 gloo ranks x micro-batch 2 == 1 rank x micro-batch 4 (the same global batch, accumulation 2).

    Tolerance: the two runs sum the same per-token losses in a different order (fp32), so losses agree to ~1e-6
    relative; after 6 AdamW steps the weights agree to 2e-5 absolute (lr 3e-3 x a few ulps of relative change in m/sqrt(v))."""
    l1, p1 = one_rank_run
    l2, p2 = _run_cli(tmp_path, f"two_{parallel}", 2, ["--batch_size", "2", "--parallel", parallel])
    assert len(l1) == len(l2) == 6
    torch.testing.assert_close(torch.tensor(l2), torch.tensor(l1), rtol=1e-5, atol=1e-5)
    for k in p1: torch.testing.assert_close(p2[k], p1[k], rtol=1e-4, atol=2e-5, msg=lambda m: f"{k}: {m}")
    if parallel == "fsdp":       # and the sharded checkpoint of step 6 resumes (full state dicts gathered on rank 0)
        _run_cli(tmp_path, f"two_{parallel}", 2, ["--batch_size", "2", "--parallel", parallel, "--resume", "auto", "--max_steps", "8"])
        recs = read_metrics(tmp_path / f"two_{parallel}" / "metrics.jsonl")
        assert [r["step"] for r in recs if r["kind"] == "train"] == list(range(1, 9))
        assert any(r.get("event") == "resume" and r["step"] == 6 for r in recs)


@pytest.fixture(scope="module")
def one_rank_run(tmp_path_factory):
    return _run_cli(tmp_path_factory.mktemp("one"), "one", 1, ["--batch_size", "4"])


def test_damaged_val_shard_is_an_error_naming_it(tmp_path):
    "A truncated validation shard stops the run with the file's name; it must not quietly turn evaluation off."
    from mamba3_lite.data.shards import ShardError
    cfg = tiny_cfg(tmp_path)
    val = Path(cfg.data_path) / "val_000000.bin"
    val.write_bytes(val.read_bytes()[:-10])
    with pytest.raises(ShardError, match="val_000000.bin"):
        Pretrainer(cfg)


def test_final_export_is_atomic_and_load_errors_name_the_file(tmp_path):
    from mamba3_lite.model import Mamba3Transformer
    from mamba3_lite.train.export import save_pretrained
    model = Mamba3Transformer(ModelConfig(**MODEL))
    d = save_pretrained(model, tmp_path / "final")                      # the config is the model's own (model.cfg)
    save_pretrained(model, d)                                           # over an existing export: replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]      # no temp or old folders left behind
    m = from_pretrained(d)
    for (k, p), q in zip(model.state_dict().items(), m.state_dict().values()): assert torch.equal(p, q), k
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(ValueError, match="model.safetensors"):
        from_pretrained(d)


def test_fsdp2_fused_adamw_skips_on_device(tmp_path):
    """FSDP2's DTensor parameters with a fused AdamW (what a multi-GPU run with `--parallel fsdp` builds): the update queued
    with chapter 07b's `queue_update` is skipped whole when the flag is 1 and applied when it is 0 (one process, gloo)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from mamba3_lite.model import Mamba3Transformer
    from mamba3_lite.train.optim import clip_grad_norm, nonfinite, queue_update
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        m = Mamba3Transformer(ModelConfig(**MODEL))
        for b in m.layers: fully_shard(b)
        fully_shard(m)
        o = build_optimizer(m, tiny_cfg(tmp_path), fused=True)
        assert skips_on_device(o) and type(next(m.parameters())).__name__ == "DTensor"
        x = torch.randint(0, 256, (2, 33))
        m(x[:, :-1], targets=x[:, 1:]).backward()
        g = clip_grad_norm(list(m.parameters()), 1.0)
        before = [p.full_tensor().clone() for p in m.parameters()]
        queue_update(o, 1e-3, skip=nonfinite(torch.stack([g, torch.tensor(float("nan"))])))
        assert all(torch.equal(p.full_tensor(), b) for p, b in zip(m.parameters(), before))
        queue_update(o, 1e-3, skip=nonfinite(torch.stack([g, g])))
        assert not any(torch.equal(p.full_tensor(), b) for p, b in zip(m.parameters(), before) if p.numel() > 16)
    finally:
        dist.destroy_process_group()
