"""Issue 9, the CLI/config/export/generate part: every user error is one clear line naming the field or file, and an
export carries its own integrity. Fast: in-process, models of a few hundred parameters, a stand-in trainer where only
the CLI's handling is under test; one subprocess for a real damaged shard."""
import errno, json, os, struct, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mamba3_lite.pretrain as pretrain
from mamba3_lite.data.shards import ShardError, write_shard
from mamba3_lite.model import ModelConfig, Mamba3Transformer
from mamba3_lite.pretrain import main
from mamba3_lite.train.checkpoint import CheckpointError, ResumeError
from mamba3_lite.train.config import ConfigError, TrainingConfig
from mamba3_lite.train.distributed import init_distributed
from mamba3_lite.train.export import from_pretrained, save_pretrained

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
SMALL = dict(vocab_size=16, d_model=8, n_layers=1, n_heads=1, head_dim=8, state_dim=2, chunk_size=4, ffn_dim=8, max_seq_len=16)
TINY_RUN = ["--preset", "tiny", "--model", json.dumps(SMALL), "--max_steps", "2", "--warmup_steps", "1"]


def divergence_error():
    from mamba3_lite.train import checkpoint
    return getattr(checkpoint, "DivergenceError")          # W1's, in 07c


# ---- export integrity -------------------------------------------------------------------------------------------
@pytest.fixture
def export(tmp_path) -> Path:
    torch.manual_seed(0)
    return save_pretrained(Mamba3Transformer(ModelConfig(**SMALL)), tmp_path / "hf")


def nan_tensor_bytes(path: Path):
    "Overwrite every tensor byte of a .safetensors file with float32 NaN, the header left as it was."
    raw = bytearray(path.read_bytes())
    start = 8 + struct.unpack("<Q", raw[:8])[0]
    nan = np.full((len(raw) - start) // 4, np.nan, np.float32).tobytes()
    raw[start:start + len(nan)] = nan
    path.write_bytes(bytes(raw))


def test_export_records_a_sha256_per_file(export):
    sums = dict(reversed(line.split("  ", 1)) for line in (export / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == ["config.json", "model.safetensors"]
    import hashlib
    for name, h in sums.items(): assert hashlib.sha256((export / name).read_bytes()).hexdigest() == h


def test_from_pretrained_refuses_nan_overwritten_weights(export):
    nan_tensor_bytes(export / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors.*sha256") as e: from_pretrained(export)
    assert "\n" not in str(e.value)


def test_from_pretrained_refuses_an_edited_config(export):
    cfg = json.loads((export / "config.json").read_text()); cfg["chunk_size"] = 8      # valid, but not what was saved
    (export / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json.*sha256"): from_pretrained(export)


def test_old_export_without_hashes_still_loads(export):
    (export / "SHA256SUMS").unlink()
    m = from_pretrained(export)
    assert m.cfg == ModelConfig(**SMALL)


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(d_modle=8), "d_modle"),                              # unknown key
    (lambda c: c.update(d_model="wide"), "d_model"),                         # wrong type
    (lambda c: c.update(n_layers=2.5), "n_layers"),
    (lambda c: c.update(weight_tying="yes"), "weight_tying"),
    (lambda c: c.update(rms_norm_eps="tiny"), "rms_norm_eps"),
    (lambda c: c.update(model_type="llama"), "model_type"),                  # another architecture's export
])
def test_bad_config_json_names_the_file_and_the_key(export, edit, key):
    (export / "SHA256SUMS").unlink()                                         # an old export, or a hand-edited one
    cfg = json.loads((export / "config.json").read_text()); edit(cfg)
    (export / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as e: from_pretrained(export)
    msg = str(e.value)
    assert str(export / "config.json") in msg and key in msg and "\n" not in msg, msg


def test_malformed_config_json_names_the_file(export):
    (export / "config.json").write_text('{"d_model": 8,')
    with pytest.raises(ValueError, match=r"config\.json: .*(line|column)"): from_pretrained(export)


# ---- generate's inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Mamba3Transformer(ModelConfig(**SMALL))


def test_generate_1d_prompt_is_batch_one(model):
    p = torch.tensor([1, 2, 3])
    out = model.generate(p, 4, temperature=0)
    assert out.shape == (7,)
    assert torch.equal(out, model.generate(p[None], 4, temperature=0)[0])
    assert torch.equal(model.generate(p, 0), p)


@pytest.mark.parametrize("idx", [torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                                 torch.zeros(0, 3, dtype=torch.long)])
def test_generate_empty_prompt(model, idx):
    with pytest.raises(ValueError, match="idx"): model.generate(idx, 2)


@pytest.mark.parametrize("n, exc", [(-5, ValueError), (2.5, TypeError), ("3", TypeError), (True, TypeError)])
def test_generate_bad_max_new_tokens(model, n, exc):
    with pytest.raises(exc, match="max_new_tokens"): model.generate(torch.tensor([[1, 2]]), n)


def test_generate_bad_prompt_shape_or_type(model):
    with pytest.raises(ValueError, match="idx"): model.generate(torch.zeros(1, 2, 3, dtype=torch.long), 1)
    with pytest.raises(TypeError, match="idx"): model.generate([[1, 2]], 1)
    assert model.generate(torch.tensor([[1, 2]]), np.int64(2)).shape == (1, 4)       # any integer type is fine


# ---- config -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [2**64, 2**63, -1])
def test_seed_out_of_range_names_seed(seed, capsys):
    with pytest.raises(ConfigError, match="seed"): TrainingConfig(seed=seed)
    assert main(["--preset", "tiny", "--dry-run", "--seed", str(seed)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: seed:") and err.count("\n") == 1, err


def test_largest_seed_is_accepted():
    assert TrainingConfig(seed=2**63 - 1).seed == 2**63 - 1
    torch.Generator().manual_seed(2**63 - 1 + 10**9)          # the sampling generator's seed + step still fits


def test_allow_config_change_field():
    assert TrainingConfig().allow_config_change == ""
    c = TrainingConfig(allow_config_change=" lr, model.chunk_size ,gradient-accumulation-steps")
    assert c.allow_config_change == "lr,model.chunk_size,gradient_accumulation_steps"
    for bad, name in [("lrr", "lrr"), ("lr,model.d_modle", "model.d_modle"), ("model", "model"), ("model.", "model.")]:
        with pytest.raises(ConfigError, match=r"allow_config_change: .*" + name.replace(".", r"\.")): TrainingConfig(allow_config_change=bad)
    with pytest.raises(ConfigError, match="did you mean lr"): TrainingConfig(allow_config_change="lrr")
    cfg = pretrain.build_config("tiny", overrides=pretrain.parse_overrides(["--allow-config-change", "lr,model.chunk_size"]))
    assert cfg.allow_config_change == "lr,model.chunk_size"


def test_device_cuda_without_cuda_is_a_config_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    for dev in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match=r"^device: .*CUDA"): init_distributed(dev)
    assert main([*TINY_RUN, "--device", "cuda", "--checkpoint_dir", str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: device:") and err.count("\n") == 1, err
    assert not (tmp_path / "ck").exists()                     # refused before anything was built or written


def test_warmup_longer_than_the_run_warns(capsys):
    assert main(["--preset", "tiny", "--dry-run", "--warmup_steps", "1000", "--max_steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "warning: warmup_steps" in err and "max_steps" in err and err.count("\n") == 1, err
    assert main(["--preset", "tiny", "--dry-run"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_help_names_the_collision_policy_and_debug():
    h = pretrain._parser().format_help()
    assert "<dir>-2" in h and "--resume auto" in h and "--debug" in h and "MAMBA3_LITE_DEBUG" in h


# ---- the CLI: one line per error, exit 2 before training, 1 during ----------------------------------------------
class FakeTrainer:
    "Stands in for Pretrainer: raises `at_init` when built, `at_train` when training."
    at_init = at_train = None
    def __init__(self, cfg):
        if FakeTrainer.at_init is not None: raise FakeTrainer.at_init
    def train(self): raise FakeTrainer.at_train
    def close(self, barrier=True): pass


def _enospc():
    return OSError(errno.ENOSPC, "No space left on device", "/ck/step_00000010")


def _torch_save_full_disk():
    try: raise _enospc()
    except OSError as e:
        try: raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0") from e
        except RuntimeError as r: return r


CASES = [  # (where, exception factory, exit status, the line)
    ("init", lambda: ShardError("/data/train_000000.bin", "truncated: 3 bytes"), 2, "error: /data/train_000000.bin: truncated: 3 bytes"),
    ("init", lambda: PermissionError(errno.EACCES, "Permission denied", "/ck"), 2, "error: Permission denied (/ck)"),
    ("init", lambda: OSError(errno.EROFS, "Read-only file system", "/ck/.probe"), 2, "error: Read-only file system (/ck/.probe)"),
    ("init", lambda: ConfigError("model.max_seq_len: 128 is longer than the 100 tokens of the train split"), 2,
     "error: model.max_seq_len: 128 is longer than the 100 tokens of the train split"),
    ("init", lambda: ResumeError("refusing to resume from /ck/step_1: lr: 0.001 -> 0.1"), 1, "error: refusing to resume from /ck/step_1: lr: 0.001 -> 0.1"),
    ("init", lambda: CheckpointError("/ck/step_1/state.pt: sha256 mismatch"), 1, "error: /ck/step_1/state.pt: sha256 mismatch"),
    ("train", _enospc, 1, "error: No space left on device (/ck/step_00000010)"),
    ("train", _torch_save_full_disk, 1, "error: No space left on device (/ck/step_00000010)"),
    ("train", lambda: CheckpointError("/ck/step_2: cannot write"), 1, "error: /ck/step_2: cannot write"),
    ("train", lambda: divergence_error()("loss is nan at step 7 after 5 rollbacks; last good checkpoint: /ck/step_5"), 1,
     "error: loss is nan at step 7 after 5 rollbacks; last good checkpoint: /ck/step_5"),
]


@pytest.mark.parametrize("where, make, status, line", CASES)
def test_cli_errors_are_one_line(where, make, status, line, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pretrain, "Pretrainer", FakeTrainer)
    monkeypatch.setattr(FakeTrainer, "at_init", make() if where == "init" else None)
    monkeypatch.setattr(FakeTrainer, "at_train", make() if where == "train" else None)
    monkeypatch.delenv("MAMBA3_LITE_DEBUG", raising=False)
    assert main([*TINY_RUN, "--checkpoint_dir", str(tmp_path / "ck")]) == status
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(how, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pretrain, "Pretrainer", FakeTrainer)
    monkeypatch.setattr(FakeTrainer, "at_init", None)
    monkeypatch.setattr(FakeTrainer, "at_train", _enospc())
    if how == "env": monkeypatch.setenv("MAMBA3_LITE_DEBUG", "1")
    assert main([*TINY_RUN, "--checkpoint_dir", str(tmp_path / "ck")] + (["--debug"] if how == "flag" else [])) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("error: No space left on device (/ck/step_00000010)"), err


def test_a_bug_is_not_swallowed(monkeypatch, tmp_path):
    "Only the project's error types and OSError are user errors; anything else is a bug and keeps its traceback."
    monkeypatch.setattr(pretrain, "Pretrainer", FakeTrainer)
    monkeypatch.setattr(FakeTrainer, "at_init", None)
    monkeypatch.setattr(FakeTrainer, "at_train", KeyError("oops"))
    with pytest.raises(KeyError): main([*TINY_RUN, "--checkpoint_dir", str(tmp_path / "ck")])


def test_damaged_shard_at_start_up(tmp_path):
    "The real command on a shard whose header was overwritten: one line naming the shard, exit 2, no traceback."
    d = tmp_path / "data"; d.mkdir()
    write_shard(d / "train_000000.bin", list(range(16)) * 200, 16)
    write_shard(d / "val_000000.bin", list(range(16)) * 20, 16)
    with open(d / "train_000000.bin", "r+b") as f: f.write(b"XXXXXXXX")
    r = subprocess.run([sys.executable, "-m", "mamba3_lite.pretrain", *TINY_RUN, "--data_path", str(d), "--device", "cpu",
                        "--checkpoint_dir", str(tmp_path / "ck")], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "MAMBA3_LITE_DEBUG": ""})
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith(f"error: {d / 'train_000000.bin'}: not a mamba3_lite token shard"), r.stderr
