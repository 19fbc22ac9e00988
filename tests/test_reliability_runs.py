"""Issue 9, runs and checkpoints: runs never collide, nothing non-finite is ever saved, asking to resume means resume,
resume checks everything that changes the trajectory, start-up checks and cleanup, rollbacks marked in the metrics.

CPU only, on the byte-corpus runs of test_training.py (a few thousand parameters, a second or two each)."""
import dataclasses, errno, fcntl, hashlib, json, os, shutil, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pytest
import torch

from mamba3_lite.train.checkpoint import CheckpointManager, DivergenceError, ResumeError
from mamba3_lite.train.config import ConfigError, TrainingConfig
from mamba3_lite.train.metrics import plot_metrics, read_metrics
from mamba3_lite.train.optim import lr_at
from mamba3_lite.train.trainer import Pretrainer
from test_training import NanAt, tiny_cfg

torch.set_num_threads(1)
TESTS = Path(__file__).resolve().parent


def snapshot(folder: Path) -> dict:
    "Every path under `folder`, hidden ones too -> the sha256 of a file's bytes, or 'dir'."
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def events(ck: Path) -> list[dict]:
    return [r for r in read_metrics(ck / "metrics.jsonl") if r["kind"] == "event"]


def all_finite(state_or_model) -> bool:
    sd = state_or_model if isinstance(state_or_model, dict) else state_or_model.state_dict()
    return all(torch.isfinite(v).all() for v in sd.values() if torch.is_tensor(v) and v.is_floating_point())


def saved_states_are_finite(ck: Path) -> bool:
    cm = CheckpointManager(ck, is_writer=False)
    return all(all_finite(cm.load(p)["model"]) for p in cm.checkpoints())


# ---- runs never collide (case 1) --------------------------------------------------------------------------------
def test_fresh_run_never_touches_another_run(tmp_path, capsys):
    "Run A, then run B without --resume into A's folder: B writes to `<dir>-2` and says so; not one byte of A changes."
    ck = tmp_path / "ck"
    Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0)).train()
    (ck / ".tmp-step_00000012-4242").mkdir()                 # even A's stale temporary is not B's to clean
    before = snapshot(ck)
    capsys.readouterr()
    b = Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0, seed=7))
    said = [line for line in capsys.readouterr().out.splitlines() if "ck-2" in line]
    assert b.cfg.checkpoint_dir == str(tmp_path / "ck-2")
    assert len(said) == 1 and str(ck) in said[0] and "--resume auto --checkpoint_dir" in said[0], said
    out = b.train()
    assert snapshot(ck) == before
    assert out["final"] == str(tmp_path / "ck-2" / "final")
    assert sorted(p.name for p in (tmp_path / "ck-2").glob("step_*")) == ["step_00000004", "step_00000008"]
    assert json.loads((tmp_path / "ck-2" / "config.json").read_text())["checkpoint_dir"] == str(tmp_path / "ck-2")
    assert Pretrainer(tiny_cfg(tmp_path, eval_every=0)).cfg.checkpoint_dir == str(tmp_path / "ck-3")
    a = Pretrainer(tiny_cfg(tmp_path, max_steps=10, eval_every=0, resume="auto"))      # A goes on where it was
    assert (a.cfg.checkpoint_dir, a.step) == (str(ck), 8)
    (tmp_path / "empty").mkdir()                             # a folder without a run in it is used as it is
    assert Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "empty"))).cfg.checkpoint_dir == str(tmp_path / "empty")


def test_the_same_command_twice_in_a_row(tmp_path, capsys):
    "The README's point: one command run twice works both times, and the second leaves the first run alone."
    from mamba3_lite.pretrain import main
    cfgf = tmp_path / "run.json"
    cfgf.write_text(json.dumps(tiny_cfg(tmp_path, max_steps=4, eval_every=0).to_dict()))
    assert main(["--config", str(cfgf)]) == 0
    first = snapshot(tmp_path / "ck")
    assert main(["--config", str(cfgf)]) == 0
    assert f"final weights in {tmp_path / 'ck-2' / 'final'}" in capsys.readouterr().out
    assert snapshot(tmp_path / "ck") == first


# ---- nothing non-finite is ever saved (case 2) ------------------------------------------------------------------
class InfAfter(Pretrainer):
    "Writes inf into `norm_f.weight` right after optimizer step `at`, once: a poisoned update the loss did not show."
    def __init__(self, cfg, at):
        self.at = at
        super().__init__(cfg)

    def train_step(self, **kw):
        out = super().train_step(**kw)
        if self.step == self.at:
            with torch.no_grad(): self.model.norm_f.weight[0] = float("inf")
            self.at = None
        return out


def record_saves(monkeypatch) -> list:
    "(step, finite?) of every state handed to CheckpointManager.save."
    seen, save = [], CheckpointManager.save
    def spy(self, step, state, meta=None):
        seen.append((step, all_finite(state["model"])))
        return save(self, step, state, meta)
    monkeypatch.setattr(CheckpointManager, "save", spy)
    return seen


def test_a_nonfinite_weight_is_never_saved(tmp_path, monkeypatch):
    "inf after step 6: steps 7-11 are non-finite; step 8's checkpoint is refused, step 11 rolls back to step 4, the run ends finite."
    from mamba3_lite.train.export import from_pretrained
    seen = record_saves(monkeypatch)
    t = InfAfter(tiny_cfg(tmp_path, max_steps=16, eval_every=0), at=6)
    out = t.train()
    assert seen and all(ok for _, ok in seen), seen
    ev = [(e["event"], e["step"]) for e in events(tmp_path / "ck")]
    assert ("save_refused", 8) in ev and ("rollback", 11) in ev, ev
    assert [e["to_step"] for e in events(tmp_path / "ck") if e["event"] == "rollback"] == [4]
    assert out["step"] == 16 and all_finite(t.model) and all_finite(from_pretrained(out["final"]))
    assert saved_states_are_finite(tmp_path / "ck")


def test_out_of_rollbacks_is_a_divergence_naming_the_last_good_checkpoint(tmp_path):
    "Every step from 5 on is NaN: roll back to step 4 until the guard's rollbacks run out; then an error, step 4 still on disk."
    t = NanAt(tiny_cfg(tmp_path, max_steps=40, eval_every=0), bad_calls=range(9, 10**6))
    t.guard.max_rollbacks = 2
    with pytest.raises(DivergenceError, match=r"step_00000004") as e: t.train()
    assert "rolled back" in str(e.value) and "\n" not in str(e.value)
    ck = tmp_path / "ck"
    assert [p.name for p in CheckpointManager(ck).checkpoints()] == ["step_00000004"]      # pruning kept it
    assert saved_states_are_finite(ck) and not (ck / "final").exists()


def test_nonfinite_final_weights_are_not_exported(tmp_path):
    "The last update poisons a weight: no checkpoint of step 12, no final/, an error naming step 8."
    t = InfAfter(tiny_cfg(tmp_path, max_steps=12, eval_every=0), at=12)
    with pytest.raises(DivergenceError, match=r"norm_f\.weight.*step_00000008"): t.train()
    ck = tmp_path / "ck"
    assert not (ck / "final").exists() and not (ck / "step_00000012").exists() and saved_states_are_finite(ck)


def test_lr_1e30_exits_non_zero_and_saves_nothing_nonfinite(tmp_path, capsys):
    "The issue's command: --warmup_steps 0 --lr 1e30. Every saved state is finite, no final/, exit 1 with one line."
    from mamba3_lite.pretrain import main
    cfgf = tmp_path / "run.json"
    cfgf.write_text(json.dumps(tiny_cfg(tmp_path, max_steps=30, eval_every=0, save_every=2).to_dict()))
    assert main(["--config", str(cfgf), "--warmup_steps", "0", "--lr", "1e30"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: training diverged") and "Traceback" not in err, err[-2000:]
    ck = tmp_path / "ck"
    assert not (ck / "final").exists() and saved_states_are_finite(ck)


def test_pruning_never_removes_the_last_good_checkpoint(tmp_path):
    "Damaged checkpoints of higher steps (12, 16, 20) do not count: the checkpoint just saved survives keep_last=2."
    Pretrainer(tiny_cfg(tmp_path, max_steps=20, eval_every=0, keep_last=5)).train()
    ck = tmp_path / "ck"
    for s in (12, 16, 20):
        f = ck / f"step_{s:08d}" / "state.pt"; f.write_bytes(f.read_bytes()[:1000])
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=20, eval_every=0, keep_last=2, resume="auto"))
    assert t.step == 8
    t.train(until_step=12)
    cm = CheckpointManager(ck, is_writer=False)
    assert cm.load(cm.path_for(12))["step"] == 12 and cm.load(cm.path_for(8))["step"] == 8
    assert sorted(p.name for p in ck.glob("step_*")) == [f"step_{s:08d}" for s in (8, 12, 16, 20)]


# ---- asking to resume means resume (case 3) ---------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["bytes", "markers"])
def test_resume_auto_with_every_checkpoint_damaged_is_an_error(tmp_path, damage):
    Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0)).train()
    ck = tmp_path / "ck"
    for d in ck.glob("step_*"):
        if damage == "markers": (d / "COMPLETE").unlink()
        else:
            f = d / "state.pt"; b = bytearray(f.read_bytes()); b[200:300] = bytes(100); f.write_bytes(bytes(b))
    before = snapshot(ck)
    with pytest.raises(ResumeError, match=r"none of the 2 checkpoint") as e:
        Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0, resume="auto"))
    assert "step_00000004" in str(e.value) and "step_00000008" in str(e.value)
    assert snapshot(ck) == before                            # nothing deleted or overwritten


def test_resume_auto_without_any_checkpoint_starts_fresh_and_says_so(tmp_path, capsys):
    t = Pretrainer(tiny_cfg(tmp_path, resume="auto"))
    assert t.step == 0 and "starting from scratch" in capsys.readouterr().out


# ---- resume checks everything that changes the trajectory (case 5) ----------------------------------------------
@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    "A run of 12 steps stopped after step 8: checkpoints 4 and 8."
    tmp = tmp_path_factory.mktemp("stopped")
    Pretrainer(tiny_cfg(tmp, eval_every=0)).train(until_step=8)
    return tmp / "ck"


def resume_cfg(tmp_path, stopped_run, **kw) -> TrainingConfig:
    shutil.copytree(stopped_run, tmp_path / "ck")
    return tiny_cfg(tmp_path, **{"eval_every": 0, "resume": "auto", **kw})


@pytest.mark.parametrize("change, line", [
    (dict(gradient_accumulation_steps=6), "gradient_accumulation_steps: 2 -> 6"),
    (dict(lr=0.3), "lr: 0.003 -> 0.3"),
    (dict(max_steps=10), "max_steps: 12 -> 10"),                 # lowering it reshapes the schedule
    (dict(warmup_steps=0), "warmup_steps: 3 -> 0"),
    (dict(betas=(0.9, 0.99)), "betas: [0.9, 0.95] -> [0.9, 0.99]"),
    (dict(model={"chunk_size": 8}), "model.chunk_size: 16 -> 8"),
    (dict(nan_guard=False), "nan_guard: True -> False"),
])
def test_resume_refuses_a_changed_field(tmp_path, stopped_run, change, line):
    cfg = resume_cfg(tmp_path, stopped_run, **change)
    before = snapshot(tmp_path / "ck")
    with pytest.raises(ResumeError, match="refusing to resume") as e: Pretrainer(cfg)
    assert f"\n  {line}\n" in str(e.value) + "\n", str(e.value)
    with open(tmp_path / "ck" / ".run-lock") as fh: fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)   # the refused start let the folder go
    assert "--allow-config-change" in str(e.value)
    assert snapshot(tmp_path / "ck") == before


def test_every_field_is_checked_but_the_free_ones(tmp_path, stopped_run):
    "Each TrainingConfig and ModelConfig field, changed in the checkpoint's record: refused unless in RESUME_FREE_FIELDS."
    from mamba3_lite.train.trainer import RESUME_FREE_FIELDS
    t = Pretrainer(resume_cfg(tmp_path, stopped_run))
    state = CheckpointManager(tmp_path / "ck").load(tmp_path / "ck" / "step_00000008")
    t.check_compatible(state, "same")                       # unchanged: fine
    names = [f for f in state["config"] if f != "model"] + [f"model.{k}" for k in state["model_config"]]
    assert set(RESUME_FREE_FIELDS) <= set(names) | {"allow_config_change"}, set(RESUME_FREE_FIELDS) - set(names)
    for name in names:
        old = {**state, "config": dict(state["config"]), "model_config": dict(state["model_config"])}
        if name.startswith("model."): old["model_config"][name[6:]] = "something else"
        else: old["config"][name] = 10**9 if name == "max_steps" else "something else"     # a checkpoint of a longer run
        if name in RESUME_FREE_FIELDS: t.check_compatible(old, "changed")
        else:
            with pytest.raises(ResumeError, match=rf"\n  {name}: "): t.check_compatible(old, "changed")


def test_allowed_changes_are_applied_and_printed(tmp_path, stopped_run, capsys):
    cfg = resume_cfg(tmp_path, stopped_run, lr=0.3, gradient_accumulation_steps=6, model={"chunk_size": 8},
                     allow_config_change="lr,gradient_accumulation_steps,model.chunk_size")
    t = Pretrainer(cfg)
    out = capsys.readouterr().out
    assert t.step == 8
    for line in ("lr: 0.003 -> 0.3", "gradient_accumulation_steps: 2 -> 6", "model.chunk_size: 16 -> 8"): assert line in out, out
    assert t.train()["step"] == 12
    with pytest.raises(ResumeError, match=r"\n  warmup_steps: 3 -> 0\n") as e:     # what is not allowed is still refused
        Pretrainer(resume_cfg(tmp_path / "again", stopped_run, lr=0.3, warmup_steps=0, allow_config_change="lr"))
    assert "\n  lr: " not in str(e.value)


def test_raising_max_steps_needs_no_flag_and_is_printed(tmp_path, stopped_run, capsys):
    t = Pretrainer(resume_cfg(tmp_path, stopped_run, max_steps=20))
    out = capsys.readouterr().out
    assert t.step == 8
    old, new = lr_at(8, dataclasses.replace(t.cfg, max_steps=12)), lr_at(8, t.cfg)
    said = [line for line in out.splitlines() if "max_steps: 12 -> 20" in line]
    assert len(said) == 1 and f"{new:.3g}" in said[0] and f"{old:.3g}" in said[0], out
    assert t.train()["step"] == 20


def test_fields_that_do_not_change_the_trajectory_may_change(tmp_path, stopped_run):
    t = Pretrainer(resume_cfg(tmp_path, stopped_run, log_every=3, eval_every=2, eval_batches=1, save_every=2, keep_last=3,
                              sample_tokens=4, model={"grad_checkpoint": True}))
    assert t.step == 8


def test_data_without_a_content_hash_is_resumed_with_a_warning(tmp_path, stopped_run, capsys):
    "The byte shards of these tests have no meta.json, so no content hash: resume says once that it can't verify them."
    t = Pretrainer(resume_cfg(tmp_path, stopped_run))
    said = [line for line in capsys.readouterr().out.splitlines() if "cannot be verified" in line]
    assert t.step == 8 and len(said) == 1 and "prepare" in said[0], said


def test_same_size_different_data_is_refused(tmp_path):
    "Re-tokenised data: same shard names, same token count, other tokens. The content hash in meta.json tells them apart."
    from mamba3_lite.data.loader import PretrainDataset
    from mamba3_lite.data.prepare import prepare
    (tmp_path / "a.txt").write_text(" the cat sat" * 2000)
    (tmp_path / "b.txt").write_text(" sat the cat" * 2000)
    data = tmp_path / "prep"
    prepare([tmp_path / "a.txt"], data, workers=1, progress=False)
    kw = dict(data_path=str(data), model={"vocab_size": 50257}, eval_every=0)
    Pretrainer(tiny_cfg(tmp_path, **kw)).train(until_step=4)
    n, h = PretrainDataset(data, 32, 50257).n_tokens, PretrainDataset(data, 32, 50257).content_sha256
    prepare([tmp_path / "b.txt"], data, workers=1, progress=False, overwrite=True)
    again = PretrainDataset(data, 32, 50257)
    assert again.n_tokens == n and again.content_sha256 not in (None, h)
    with pytest.raises(ResumeError, match=r"\n  data\.content_sha256: "): Pretrainer(tiny_cfg(tmp_path, resume="auto", **kw))


# ---- start-up checks (case 6) -----------------------------------------------------------------------------------
def test_unwritable_checkpoint_dir_is_found_before_training(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"^checkpoint_dir: .*a_file"):
        Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "a_file" / "ck")))
    ck = tmp_path / "ck"; ck.mkdir()                         # a folder that refuses new files (as root, chmod can't show it)
    real_open = open
    def refusing(file, mode="r", *a, **k):
        if isinstance(file, (str, os.PathLike)) and Path(file).parent == ck and set(mode) & set("wxa"):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, mode, *a, **k)
    monkeypatch.setattr("builtins.open", refusing)
    with pytest.raises(ConfigError, match=rf"^checkpoint_dir: .*{ck}.*Permission denied"): Pretrainer(tiny_cfg(tmp_path))
    assert list(ck.iterdir()) == []


def test_full_disk_while_saving_names_the_path_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, capsys):
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=12, eval_every=0))
    t.train(until_step=4)
    ck = tmp_path / "ck"
    before = snapshot(ck / "step_00000004")
    real_open = open
    def full_disk(file, mode="r", *a, **k):                 # the next state.pt goes to /dev/full: a real ENOSPC
        if isinstance(file, (str, os.PathLike)) and Path(file).name == "state.pt" and "w" in mode: file = "/dev/full"
        return real_open(file, mode, *a, **k)
    monkeypatch.setattr("builtins.open", full_disk)
    with pytest.raises(OSError) as e: t.train()
    assert (e.value.errno, e.value.strerror, e.value.filename) == (errno.ENOSPC, "No space left on device", str(ck / "step_00000008"))
    assert f"No space left on device ({ck / 'step_00000008'})" in capsys.readouterr().out
    monkeypatch.undo()
    assert snapshot(ck / "step_00000004") == before and not list(ck.glob(".tmp-*"))
    assert [p.name for p in CheckpointManager(ck).checkpoints()] == ["step_00000004"]
    assert Pretrainer(tiny_cfg(tmp_path, max_steps=12, eval_every=0, resume="auto")).step == 4


def test_window_longer_than_the_data_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"^model\.max_seq_len: "):
        Pretrainer(tiny_cfg(tmp_path, model={"max_seq_len": 100_000_000}))
    assert not (tmp_path / "ck").exists()


def test_damaged_train_shard_at_start_up_is_a_shard_error(tmp_path):
    from mamba3_lite.data.shards import ShardError
    cfg = tiny_cfg(tmp_path)
    f = Path(cfg.data_path) / "train_000000.bin"
    with open(f, "r+b") as fh: fh.write(b"XXXXXXXX")
    with pytest.raises(ShardError, match="train_000000.bin"): Pretrainer(cfg)


# ---- start-up cleanup and kills (case 7) ------------------------------------------------------------------------
def test_start_up_cleans_only_its_own_stale_temporaries(tmp_path, capsys):
    Pretrainer(tiny_cfg(tmp_path, max_steps=8, eval_every=0)).train()
    ck = tmp_path / "ck"
    stale = [".tmp-step_00000012-4242", ".final.tmp-4242-0badc0de", "final.tmp-4242", ".metrics.jsonl.tmp-4242-0badc0de",
             ".config.json.tmp-4242-0badc0de", ".write-probe-4242"]
    for name in stale[:3]: (ck / name).mkdir(); (ck / name / "model.safetensors").write_bytes(b"half")
    for name in stale[3:]: (ck / name).write_text("half")
    others = ["notes.txt", ".tmp-mine", "final.txt", "other.tmp-1"]      # not names the trainer writes
    for name in others: (ck / name).write_text("mine")
    final = snapshot(ck / "final")
    (ck / "final").rename(ck / ".final.old-4242-0badc0de")     # an export being replaced when the process was killed
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=10, eval_every=0, resume="auto"))
    names = {p.name for p in ck.iterdir()}
    assert t.step == 8 and not names & set(stale) and set(others) <= names, names
    assert snapshot(ck / "final") == final and not list(ck.glob(".final.old-*"))       # the complete copy is back
    assert "restored final from .final.old-4242-0badc0de" in capsys.readouterr().out


KILL_IN_RESAVE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_training import NanAt, tiny_cfg
    rename = os.rename
    def killed_after_moving_aside(src, dst):
        rename(src, dst)
        if ".old-" in Path(dst).name: os.kill(os.getpid(), signal.SIGKILL)   # the old folder aside, the new one not in place
    os.rename = killed_after_moving_aside
    NanAt(tiny_cfg(Path(sys.argv[1]), max_steps=16, eval_every=0), {{2 * (s - 1) + 1 for s in range(9, 14)}}).train()
""")


def test_kill_during_a_re_save_of_the_same_step(tmp_path, capsys):
    "Steps 9-13 NaN roll back to step 8, which is saved again; kill -9 between its two renames. The complete copy comes back."
    r = subprocess.run([sys.executable, "-c", KILL_IN_RESAVE.format(tests=str(TESTS)), str(tmp_path)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    ck = tmp_path / "ck"
    assert not (ck / "step_00000008").exists() and len(list(ck.glob(".step_00000008.old-*"))) == 1
    assert len(list(ck.glob(".tmp-step_00000008-*"))) == 1
    capsys.readouterr()
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=16, eval_every=0, resume="auto"))
    assert "restored step_00000008 from .step_00000008.old-" in capsys.readouterr().out
    assert t.step == 8 and sorted(p.name for p in ck.glob("*step_*")) == ["step_00000004", "step_00000008"]
    assert t.train()["step"] == 16 and all_finite(t.model)


def test_a_rollback_is_marked_in_the_metrics_and_nothing_is_shown_twice(tmp_path):
    bad = {2 * (s - 1) + 1 for s in range(9, 14)}             # steps 9-13: step 13 rolls back to step 8
    NanAt(tiny_cfg(tmp_path, max_steps=16), bad).train()
    path = tmp_path / "ck" / "metrics.jsonl"
    recs = read_metrics(path)
    rb = [r for r in recs if r.get("event") == "rollback"]
    assert len(rb) == 1 and rb[0]["to_step"] == 8
    for kind in ("train", "eval"):
        steps = [r["step"] for r in recs if r["kind"] == kind]
        assert steps == sorted(set(steps)), (kind, steps)
    assert [r["step"] for r in recs if r["kind"] == "train"] == list(range(1, 17))
    flagged = [r for r in read_metrics(path, superseded=True) if r.get("superseded")]
    assert sorted({r["step"] for r in flagged if r["kind"] == "train"}) == [9, 10, 11, 12]   # step 13 itself was undone, not logged
    assert [r["step"] for r in flagged if r["kind"] == "eval"] == [12]
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert sum(r["kind"] == "train" for r in raw) == 16 + 4   # the file keeps both; readers see each step once
    x = plot_metrics(recs).axes[0].lines[0].get_xdata()
    assert list(x) == sorted(set(x))


# ---- resuming never writes into another run's folder (review after issue 9) ---------------------------------------
def test_resume_path_into_another_runs_folder_is_refused(tmp_path):
    "`--resume B/step_X` with `--checkpoint_dir A` where A holds run A: refused naming both folders; A untouched."
    Pretrainer(tiny_cfg(tmp_path, max_steps=4, save_every=2, eval_every=0)).train()          # run A in ck
    Pretrainer(tiny_cfg(tmp_path, max_steps=4, save_every=2, eval_every=0)).train()          # run B lands in ck-2
    a = snapshot(tmp_path / "ck")
    b_ckpt = tmp_path / "ck-2" / "step_00000002"
    with pytest.raises(ConfigError, match=r"checkpoint_dir: .*ck holds another run.*--checkpoint_dir .*ck-2"):
        Pretrainer(tiny_cfg(tmp_path, max_steps=4, save_every=2, eval_every=0, resume=str(b_ckpt)))
    assert snapshot(tmp_path / "ck") == a
    newest = tmp_path / "ck-2" / "step_00000004"
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=4, save_every=2, eval_every=0, resume=str(newest),
                            checkpoint_dir=str(tmp_path / "ck-2")))                             # its own folder: fine
    assert t.step == 4


def test_resume_auto_without_checkpoints_never_overwrites_a_run(tmp_path, capsys):
    "A folder with a run's metrics/config/final but no checkpoint: `--resume auto` starts in a sibling, says so."
    Pretrainer(tiny_cfg(tmp_path, max_steps=2, save_every=100, eval_every=0)).train()
    for d in (tmp_path / "ck").glob("step_*"): shutil.rmtree(d)       # as if killed before its first checkpoint
    assert not list((tmp_path / "ck").glob("step_*")) and (tmp_path / "ck" / "metrics.jsonl").exists()
    before = snapshot(tmp_path / "ck")
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=2, save_every=100, eval_every=0, resume="auto"))
    assert Path(t.cfg.checkpoint_dir) == tmp_path / "ck-2" and "holds another run" in capsys.readouterr().out
    t.train()
    assert snapshot(tmp_path / "ck") == before


def test_triton_opt_in_on_a_cpu_is_refused_before_any_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ENABLE_TRITON_KERNELS", "1"); monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConfigError, match=r"^model\.ssd_dispatch: the Triton kernels run on CUDA GPUs and this run's device is cpu"):
        Pretrainer(tiny_cfg(tmp_path, model={"ssd_dispatch": "triton"}))
    assert not (tmp_path / "ck").exists()


# ---- the review of the data and trainer chapters: folders claimed, older resumes, the data at start-up --------------
HOLD = textwrap.dedent("""
    import fcntl, sys, time
    f = open(sys.argv[1], "a+"); fcntl.flock(f, fcntl.LOCK_EX); f.write("pid 4242 on elsewhere\\n"); f.flush()
    print("held", flush=True); sys.stdin.read()              # holds the lock until the test closes its stdin
""")


def hold_lock(folder: Path) -> subprocess.Popen:
    "Another process that holds `folder`'s run lock (a run that has just started there), until its stdin is closed."
    folder.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder / ".run-lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_folder_another_process_holds_is_never_shared(tmp_path, capsys):
    "H1: a fresh run into a folder a running process holds (no file of its own yet) writes to `<dir>-2`; a resume is refused."
    other = hold_lock(tmp_path / "ck")
    try:
        b = Pretrainer(tiny_cfg(tmp_path, max_steps=2, eval_every=0))
        assert b.cfg.checkpoint_dir == str(tmp_path / "ck-2") and "pid 4242 on elsewhere" in capsys.readouterr().out
        b.train(); b.close()
        CheckpointManager(tmp_path / "ck").save(2, b.state_dict())        # as if the other run had saved step 2
        with pytest.raises(ConfigError, match=r"^checkpoint_dir: .*ck is in use by a running process \(pid 4242 on elsewhere"):
            Pretrainer(tiny_cfg(tmp_path, max_steps=4, eval_every=0, resume="auto"))
    finally: other.stdin.close(); other.wait()
    assert Pretrainer(tiny_cfg(tmp_path, max_steps=4, eval_every=0, resume="auto")).step == 2   # it ended: the lock went with it


CLAIM = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from mamba3_lite.train.checkpoint import claim_run_dir
    Path(sys.argv[3]).touch()
    while not Path(sys.argv[2]).exists(): time.sleep(0.005)      # both start together
    d = claim_run_dir(sys.argv[1])[0]
    time.sleep(1.0); (Path(d) / "config.json").write_text("{}")  # the run's first file, a moment later
    print(d, flush=True)
""")


def test_two_runs_started_together_get_two_folders(tmp_path):
    "H1: two processes claim the same --checkpoint_dir at the same moment; each gets its own folder."
    go = tmp_path / "go"
    ps = [subprocess.Popen([sys.executable, "-c", CLAIM, str(tmp_path / "ck"), str(go), str(tmp_path / f"ready{i}")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in (1, 2)):
        assert time.time() < deadline and all(p.poll() is None for p in ps), [p.stderr.read() for p in ps]
        time.sleep(0.01)
    go.touch()
    got = sorted(p.communicate(timeout=60)[0].strip() for p in ps)
    assert got == [str(tmp_path / "ck"), str(tmp_path / "ck-2")], got


def test_resume_of_an_older_checkpoint_never_overwrites_newer_ones(tmp_path):
    "H2: `--resume ck/step_4` with ck holding step_6 and final/ is refused, nothing changes; a branch into a new folder works."
    Pretrainer(tiny_cfg(tmp_path, max_steps=6, save_every=2, eval_every=0)).train()
    ck = tmp_path / "ck"
    assert sorted(p.name for p in ck.glob("step_*")) == ["step_00000004", "step_00000006"] and (ck / "final").is_dir()
    before = snapshot(ck)
    older = dict(max_steps=6, save_every=2, eval_every=0, resume=str(ck / "step_00000004"), lr=1e-3, allow_config_change="lr")
    with pytest.raises(ConfigError, match=r"^resume: .*step_00000004 is older than what its folder holds \(step_00000006, final\).*"
                                          r"--checkpoint_dir <a new folder>"):
        Pretrainer(tiny_cfg(tmp_path, **older))
    assert snapshot(ck) == before
    branch = Pretrainer(tiny_cfg(tmp_path, checkpoint_dir=str(tmp_path / "branch"), **older))
    assert branch.step == 4 and branch.train()["final"] == str(tmp_path / "branch" / "final")
    assert snapshot(ck) == before
    assert Pretrainer(tiny_cfg(tmp_path, max_steps=8, save_every=2, eval_every=0, resume=str(ck / "step_00000006"))).step == 6


def test_resume_paths_that_name_no_checkpoint(tmp_path):
    "M5: a run's folder, or a checkpoint that does not exist: one line saying which, with the checkpoints there."
    Pretrainer(tiny_cfg(tmp_path, max_steps=4, save_every=2, eval_every=0)).train()
    ck = tmp_path / "ck"
    with pytest.raises(ConfigError, match=rf"^resume: {ck} is a run folder.*--resume auto --checkpoint_dir {ck}.*step_00000004"):
        Pretrainer(tiny_cfg(tmp_path, resume=str(ck)))
    with pytest.raises(ConfigError, match=r"^resume: .*step_00000099 does not exist \(checkpoints in .*ck: step_00000002, step_00000004\)"):
        Pretrainer(tiny_cfg(tmp_path, resume=str(ck / "step_00000099")))


def test_the_data_at_start_up(tmp_path, capsys):
    "H4, H5, L6: a batch larger than the data names batch_size; a val split too short to evaluate, or the train stream's tail held out, is said."
    with pytest.raises(ConfigError, match=r"^batch_size: the train split of .* fewer than one global batch of 100000 x 1"):
        Pretrainer(tiny_cfg(tmp_path, batch_size=100_000))
    from mamba3_lite.data.shards import write_shard
    data = tmp_path / "short_val"; shutil.copytree(tmp_path / "data", data)
    write_shard(data / "val_000000.bin", list(range(100)), 256)                    # 100 tokens: 3 windows of 33
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=4, eval_every=2, data_path=str(data)))
    assert t.val_ds is None and "no validation: the val split has 3 windows, fewer than one global batch of 4" in capsys.readouterr().out
    t.train()
    assert not [r for r in read_metrics(Path(t.cfg.checkpoint_dir) / "metrics.jsonl") if r["kind"] == "eval"]
    (data / "val_000000.bin").unlink()
    t = Pretrainer(tiny_cfg(tmp_path, max_steps=4, eval_every=2, data_path=str(data)))
    said = [l for l in capsys.readouterr().out.splitlines() if l.startswith("validation: ")]
    assert t.val_ds.n_tokens == 3000 and len(said) == 1 and "3,000 tokens of the train stream (5%)" in said[0], said
