"""`python -m mamba3_lite.pretrain` end to end on CPU: presets, config files, overrides, bad values, dry run,
`kill -9` during training and during a checkpoint write, refused resumes."""
import json, os, signal, subprocess, sys, textwrap, time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from test_training import byte_corpus
from mamba3_lite.pretrain import main
from mamba3_lite.train.metrics import read_metrics

torch.set_num_threads(1)      # in-process runs use models of a few thousand parameters: one thread is faster
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
MODEL = dict(vocab_size=256, d_model=32, n_layers=2, n_heads=2, head_dim=16, state_dim=8, chunk_size=16, ffn_dim=64,
             max_seq_len=32, grad_checkpoint=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    "Shakespeare as bytes (vocab 256): train/val shards."
    return byte_corpus(tmp_path_factory.mktemp("bytes"))


def write_config(path: Path, corpus: Path, ck: Path, fmt: str = "yaml", **kw) -> Path:
    cfg = {**dict(model=MODEL, data_path=str(corpus), checkpoint_dir=str(ck),
                  batch_size=4, gradient_accumulation_steps=1, max_steps=60, warmup_steps=5, lr=3e-3,
                  save_every=10, log_every=1, eval_every=0, sample_tokens=0, keep_last=2, device="cpu"), **kw}
    cfg = {k: v for k, v in cfg.items() if v is not None}          # a key set to None is left out
    if fmt == "json": path.write_text(json.dumps(cfg))
    else:
        import yaml
        path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*args, timeout=240, prefix=None):
    cmd = [sys.executable] + (prefix or ["-m", "mamba3_lite.pretrain"]) + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout, cwd=REPO)


def test_config_file_and_overrides(tmp_path, corpus):
    cfgf = write_config(tmp_path / "run.yaml", corpus, tmp_path / "ck", max_steps=8, save_every=4, eval_every=4, sample_tokens=8)
    r = cli("--config", cfgf, "--batch-size", "2", "--gradient_accumulation_steps=2", "--model.ffn_dim", "32", "--tensorboard")
    assert r.returncode == 0, r.stderr[-3000:]
    saved = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert (saved["batch_size"], saved["gradient_accumulation_steps"], saved["model"]["ffn_dim"]) == (2, 2, 32)
    assert (saved["model"]["d_model"], saved["model"]["vocab_size"]) == (32, 256)     # the file's other model fields stay
    recs = read_metrics(tmp_path / "ck" / "metrics.jsonl")
    assert [r["step"] for r in recs if r["kind"] == "train"] == list(range(1, 9))
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [4, 8]
    assert [r["step"] for r in recs if r["kind"] == "sample"] == [4, 8]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [                        # .run-lock: the folder's claim (07c)
        ".run-lock", "config.json", "final", "loss_curve.png", "metrics.jsonl", "step_00000004", "step_00000008", "tb"]
    assert list((tmp_path / "ck" / "tb").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (tmp_path / "ck" / "final").iterdir()) == ["SHA256SUMS", "config.json", "model.safetensors", "tokenizer.json"]
    assert "sample (" in r.stdout and "done: step 8" in r.stdout and " bits/byte (loss " in r.stdout
    assert saved["tokenizer"] == "bytes"                       # 'auto' with a 256-id vocabulary, recorded as what it meant


@pytest.mark.parametrize("args, status, message", [
    (["--lr", "fast"], 2, "lr: expected a number, got 'fast'"),
    (["--batch_size", "0"], 2, "batch_size: must be >= 1"),
    (["--learning_rate", "1e-3"], 2, "unknown option --learning_rate (did you mean --lr?)"),
    (["--model.d_modle", "64"], 2, "unknown option --model.d_modle (did you mean --model.d_model?)"),
    (["--model.state_dim", "7"], 2, "model.state_dim: must be"),
    (["--keep_last", "1"], 2, "keep_last: must be >= 2"),
    (["--compile_mode", "fastest"], 2, "compile_mode"),
    (["--max_seq_len", "16"], 2, "unknown option --max_seq_len (did you mean --model.max_seq_len?)"),
    (["--model_config.d_model", "64"], 2, "unknown option --model_config.d_model (did you mean --model.d_model?)"),
    (["--vocab_size", "256"], 2, "(did you mean --model.vocab_size?)"),
    (["--grad_checkpoint"], 2, "(did you mean --model.grad_checkpoint?)"),
    (["--model.d_model", "wide"], 2, "model.d_model: expected an integer, got 'wide'"),
    (["--model.block_size", "64"], 2, "unknown option --model.block_size (did you mean --model.max_seq_len?)"),   # foreign names
    (["--model.context_length", "64"], 2, "unknown option --model.context_length (did you mean --model.max_seq_len?)"),
    (["--model.n_embd", "64"], 2, "unknown option --model.n_embd (did you mean --model.d_model?)"),
    (["--model.n_layer", "2"], 2, "unknown option --model.n_layer (did you mean --model.n_layers?)"),
    (["--preset", "h100"], 2, "invalid choice: 'h100'"),
])
def test_bad_values_name_the_field(args, status, message, capsys):
    try: got = main(["--preset", "tiny", "--dry-run", *args])
    except SystemExit as e: got = e.code          # argparse's own errors (a bad --preset choice)
    assert got == status
    assert message in capsys.readouterr().err


def test_bad_config_file(tmp_path, corpus, capsys):
    bad = write_config(tmp_path / "bad.json", corpus, tmp_path / "ck", fmt="json", warmup=3, seeed=1)
    assert main(["--config", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"--config {bad}: unknown TrainingConfig field(s): seeed, warmup (did you mean: seeed -> seed, warmup -> warmup_steps?)" in err
    (tmp_path / "broken.yaml").write_text("lr: [1, 2\n")
    assert main(["--config", str(tmp_path / "broken.yaml")]) == 2 and "not valid YAML" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2 and "not found" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, message", [
    ("bom.yaml", b"\xff\xfe\x00", "not UTF-8 text"), ("int_key.yaml", b"1: 2\n", "key 1 is not a field name"),
    ("int_model_key.yaml", b"model:\n  3: 4\n", "key 3 is not a field name"),
    ("twice.yaml", b"lr: 1e-3\nlr: 2e-3\n", "key 'lr' is given twice"), ("twice.json", b'{"lr": 1e-3, "lr": 2e-3}', "key 'lr' is given twice"),
    ("flow.yaml", b"lr: [1\n  x: 2\n", "not valid YAML: "), ("folder", None, "is a folder, not a YAML or JSON file")])
def test_config_file_problems_are_one_line(tmp_path, capsys, name, content, message):
    "M1: what is wrong with a --config file is one line naming it once, exit 2."
    f = tmp_path / name
    f.mkdir() if content is None else f.write_bytes(content)
    assert main(["--preset", "tiny", "--config", str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --config {f}: {err.split(': ', 2)[2]}" and message in err and err.count("\n") == 1, err


def test_dry_run_opens_the_data_as_the_run_would(tmp_path, corpus, capsys):
    "M2: a missing data_path, a batch larger than the data, or a vocabulary 'auto' can't serve, are refused by the dry run too."
    assert main(["--preset", "tiny", "--data_path", str(tmp_path / "nowhere"), "--dry-run"]) == 2
    assert "error: data_path: " in capsys.readouterr().err
    assert main(["--preset", "tiny", "--data_path", str(corpus), "--batch_size", "100000", "--dry-run"]) == 2
    assert "error: batch_size: the train split of" in capsys.readouterr().err
    assert main(["--preset", "tiny", "--model.vocab_size", "300", "--dry-run"]) == 2
    assert "auto chose gpt2 for model.vocab_size > 256" in capsys.readouterr().err
    assert main(["--preset", "tiny", "--data_path", str(corpus), "--dry-run"]) == 0
    assert f"data: {corpus}: train 60,000 tokens" in capsys.readouterr().out
    assert main(["--preset", "tiny", "--gpu", "h200"]) == 2 and "--gpu: only with --dry-run" in capsys.readouterr().err


def test_old_spellings_in_a_file_get_a_hint(tmp_path, corpus, capsys):
    old = write_config(tmp_path / "old.yaml", corpus, tmp_path / "ck", model=None, model_config=dict(d_model=32),
                       vocab_size=256, grad_checkpoint=False)
    assert main(["--config", str(old), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (f"--config {old}: unknown TrainingConfig field(s): grad_checkpoint, model_config, vocab_size (did you mean: "
            "grad_checkpoint -> model.grad_checkpoint, model_config -> model, vocab_size -> model.vocab_size?)") in err
    bad = write_config(tmp_path / "bad.yaml", corpus, tmp_path / "ck", model=dict(MODEL, d_modle=64))
    assert main(["--config", str(bad), "--dry-run"]) == 2
    assert "unknown ModelConfig field(s): model.d_modle (did you mean: model.d_modle -> model.d_model?)" in capsys.readouterr().err
    for name, new in [("block_size", "max_seq_len"), ("context_length", "max_seq_len"), ("n_embd", "d_model"), ("n_head", "n_heads")]:
        foreign = write_config(tmp_path / "foreign.yaml", corpus, tmp_path / "ck", model={**MODEL, name: 64})   # nanoGPT names in `model:`
        assert main(["--config", str(foreign), "--dry-run"]) == 2
        assert f"unknown ModelConfig field(s): model.{name} (did you mean: model.{name} -> model.{new}?)" in capsys.readouterr().err


def test_dotted_model_keys_in_a_file(tmp_path, corpus, capsys):
    from mamba3_lite.pretrain import build_config
    nested = build_config(None, write_config(tmp_path / "nested.yaml", corpus, tmp_path / "ck"))
    flat = write_config(tmp_path / "flat.yaml", corpus, tmp_path / "ck", model=None, **{f"model.{k}": v for k, v in MODEL.items()})
    assert build_config(None, flat) == nested                        # `model.d_model: 32` is `model: {d_model: 32}`
    assert main(["--config", str(flat), "--dry-run"]) == 0
    capsys.readouterr()
    both = write_config(tmp_path / "both.yaml", corpus, tmp_path / "ck", **{"model.d_model": 64})
    assert main(["--config", str(both), "--dry-run"]) == 2
    assert f"--config {both}: model.d_model: given twice" in capsys.readouterr().err
    typo = write_config(tmp_path / "typo.yaml", corpus, tmp_path / "ck", model=None, **{"model.d_modle": 64})
    assert main(["--config", str(typo), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "model.d_modle -> model.d_model" in err and "model.d_model -> model.d_model" not in err


def test_nested_override_merges_onto_the_file(tmp_path, corpus):
    from mamba3_lite.pretrain import build_config, parse_overrides
    cfgf = write_config(tmp_path / "run.yaml", corpus, tmp_path / "ck")
    cfg = build_config("tiny", cfgf, parse_overrides(["--model.chunk_size", "8", "--model.ssd_dispatch=pytorch", "--lr", "1e-3"]))
    assert (cfg.model.chunk_size, cfg.model.d_model, cfg.model.vocab_size, cfg.model.max_seq_len, cfg.lr) == (8, 32, 256, 32, 1e-3)
    assert cfg.model.n_layers == 2 and cfg.batch_size == 4        # the file over the preset, the flags over the file
    assert cfg.to_dict()["model"]["chunk_size"] == 8 and "vocab_size" not in cfg.to_dict()


def test_dry_run_and_defaults(capsys, monkeypatch):
    assert main(["--dry-run"]) == 0                 # no CUDA here: the default is the tiny preset
    out = capsys.readouterr().out
    assert "preset: tiny" in out and "parameters" in out and "tokens per step: 2,048" in out
    assert "memory per CPU process (estimate)" in out and "time to the token budget" in out
    assert main(["--preset", "h200", "--dry-run"]) == 0
    out = capsys.readouterr().out
    # 433,710,976 real numbers: the original's 433,662,400, each head's complex A counted as two reals (+448), and the
    # 47 rows (x 1024) that pad the tied embedding to a multiple of 64 (pad_vocab_multiple, +48,128)
    assert "433,710,976 parameters" in out and "65,536" in out and "16.777B tokens" in out
    assert "memory per GPU" in out and "H200 (no GPU here)" in out and "a projection" in out
    assert main(["--preset", "a100", "--dry-run", "--gpu", "a100"]) == 0           # issue 16: the named GPU, projected
    out = capsys.readouterr().out
    assert "on 1 x A100 80GB SXM" in out and "a projection" in out and "measured on one H200" in out
    assert "memory: the estimate" not in out                                       # the a100 preset fits an A100
    assert main(["--preset", "h200", "--model.mixer", "mamba3", "--dry-run", "--gpu", "h100"]) == 0
    assert "memory: the estimate, 80.5 GB, exceeds the H100 SXM's 80 GB" in capsys.readouterr().out   # 16 x 2048: too big
    assert main(["--preset", "a100", "--dry-run", "--gpu", "v100"]) == 2
    assert "error: --gpu: no datasheet figures for 'v100'" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)      # a CUDA machine, no arguments: a summary only
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: SimpleNamespace(total_memory=150_109_880_320))
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "nothing was started" in out and "--preset h200" in out


def test_tiny_preset_runs(tmp_path):
    "The default command's preset, cut to 3 steps: bytes, the built-in corpus, the summary lines at the end."
    r = cli("--preset", "tiny", "--max_steps", "3", "--eval_every", "2", "--save_every", "2", "--sample_tokens", "4",
            "--eval_batches", "1", "--checkpoint_dir", tmp_path / "ck", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "training 953,504 parameters" in r.stdout and "tokenizer: bytes" in r.stdout and "done: step 3" in r.stdout
    lines = r.stdout.splitlines()
    val = next(l for l in lines if l.startswith("val "))
    assert val.split()[2] == "bits/byte" and 5 < float(val.split()[1]) < 8.5, val      # 3 steps: near ln(256)/ln(2) = 8 bits
    assert any(l.startswith("sample (16 tokens") for l in lines)
    assert f"final weights in {tmp_path / 'ck' / 'final'} (" in r.stdout and f"loss curve: {tmp_path / 'ck' / 'loss_curve.png'}" in r.stdout
    assert (tmp_path / "ck" / "final" / "tokenizer.json").exists() and (tmp_path / "ck" / "loss_curve.png").exists()


def test_tokenizer_flag(tmp_path, capsys):
    "GPT-2 is one flag away on a CPU: the vocabulary follows the tokenizer; a vocabulary that can't hold it is refused by name."
    from mamba3_lite.pretrain import build_config, parse_overrides
    cfg = build_config("tiny", overrides=parse_overrides(["--tokenizer", "gpt2"]))
    assert (cfg.tokenizer, cfg.model.vocab_size, cfg.model.d_model) == ("gpt2", 50257, 128)
    assert main(["--preset", "tiny", "--dry-run", "--tokenizer", "gpt2"]) == 0
    assert "vocab 50,257: gpt2" in capsys.readouterr().out
    assert main(["--preset", "tiny", "--dry-run", "--tokenizer", "gpt2", "--model.vocab_size", "256"]) == 2
    assert "error: tokenizer: gpt2 has 50,257 ids, more than model.vocab_size 256" in capsys.readouterr().err
    cfg = build_config("tiny", overrides=parse_overrides(["--model.vocab_size", "16"]))     # a vocabulary alone: the tokenizer follows
    assert (cfg.tokenizer, cfg.tokenizer_name) == ("auto", "bytes")


def _wait_for(path: Path, proc, timeout=120):
    t = time.time()
    while not path.exists():
        assert proc.poll() is None, f"exited early: {proc.stderr.read()[-2000:]}"
        assert time.time() - t < timeout, f"{path} did not appear"
        time.sleep(0.01)


def test_kill_9_during_training_then_resume(tmp_path, corpus):
    cfgf = write_config(tmp_path / "run.yaml", corpus, tmp_path / "ck", max_steps=60)
    p = subprocess.Popen([sys.executable, "-m", "mamba3_lite.pretrain", "--config", str(cfgf)], env=ENV, cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(tmp_path / "ck" / "step_00000020" / "COMPLETE", p)
    p.send_signal(signal.SIGKILL); p.wait()
    assert p.returncode == -signal.SIGKILL
    last = max(int(d.name[5:]) for d in (tmp_path / "ck").glob("step_*"))
    r = cli("--config", cfgf, "--resume", "auto")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"resumed from step_{last:08d} (step {last}," in r.stdout
    steps = [x["step"] for x in read_metrics(tmp_path / "ck" / "metrics.jsonl") if x["kind"] == "train"]
    assert steps == list(range(1, 61))              # lines a killed run wrote after its checkpoint were dropped
    assert (tmp_path / "ck" / "final" / "model.safetensors").exists()


KILL_IN_SAVE = textwrap.dedent("""
    import os, signal, sys, torch
    orig = torch.save
    def save(obj, f, *a, **k):
        if isinstance(obj, dict) and obj.get("step") == 20:      # die half-way through writing checkpoint 20
            orig(obj, f, *a, **k); f.flush(); f.truncate(f.tell() // 2); os.fsync(f.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        return orig(obj, f, *a, **k)
    torch.save = save
    from mamba3_lite.pretrain import main
    sys.exit(main(sys.argv[1:]))
""")


def test_kill_9_during_checkpoint_write_then_resume(tmp_path, corpus):
    cfgf = write_config(tmp_path / "run.yaml", corpus, tmp_path / "ck", max_steps=30)
    r = cli("--config", cfgf, prefix=["-c", KILL_IN_SAVE])
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    ck = tmp_path / "ck"
    assert sorted(d.name for d in ck.glob("step_*")) == ["step_00000010"]        # 20 never became a checkpoint
    assert len(list(ck.glob(".tmp-step_00000020-*"))) == 1                       # only a temp dir holds the half file
    r = cli("--config", cfgf, "--resume", "auto")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removing incomplete write" in r.stdout and "resumed from step_00000010 (step 10," in r.stdout
    assert sorted(d.name for d in ck.glob("step_*")) == ["step_00000020", "step_00000030"]
    assert not list(ck.glob(".tmp-*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_says_where_the_newest_checkpoint_is(tmp_path, corpus, sig):
    "H6: one line with the step and the newest checkpoint, exit 130, no traceback; the run then resumes from it."
    cfgf = write_config(tmp_path / "run.yaml", corpus, tmp_path / "ck", max_steps=100000)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)   # a shell's `cmd &` starts pytest ignoring SIGINT
    p = subprocess.Popen([sys.executable, "-m", "mamba3_lite.pretrain", "--config", str(cfgf)], env=ENV, cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        _wait_for(tmp_path / "ck" / "step_00000010" / "COMPLETE", p)
        p.send_signal(sig)
        err = p.communicate(timeout=60)[1]
    finally:
        if p.poll() is None: p.kill(); p.wait()                        # never leave a 100,000-step run behind
    last = [line for line in err.splitlines() if line.strip()][-1]
    newest = max((tmp_path / "ck").glob("step_*"))
    assert p.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert last.startswith("interrupted at step ") and last.endswith(f"newest checkpoint: {newest} (continue: --resume auto "
                                                                     f"--checkpoint_dir {tmp_path / 'ck'})"), last
    assert not list((tmp_path / "ck").glob(".tmp-*"))


def test_resume_with_a_different_model_is_refused(tmp_path, corpus):
    cfgf = write_config(tmp_path / "run.yaml", corpus, tmp_path / "ck", max_steps=10)
    assert main(["--config", str(cfgf)]) == 0
    r = cli("--config", cfgf, "--resume", "auto", "--model.n_layers", "3")
    assert r.returncode == 1
    assert "refusing to resume from" in r.stderr and "model.n_layers: 2 -> 3" in r.stderr     # issue 9: `field: old -> new` lines
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: refusing to resume from")


def test_example_configs_match_the_presets():
    from mamba3_lite.pretrain import build_config
    import dataclasses
    assert build_config(None, REPO / "configs" / "tiny_cpu.yaml") == build_config("tiny")
    assert build_config(None, REPO / "configs" / "h200_434m.yaml") == dataclasses.replace(build_config("h200"), resume="auto")


def test_out_of_gpu_memory_is_one_line(tmp_path, capsys, monkeypatch):
    "PyTorch's out-of-memory error in training: one line that says what to change, exit 1, no traceback."
    from mamba3_lite import pretrain
    def oom(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.13 GiB. GPU 0 has a total capacity of "
                                     "79.19 GiB of which 2.04 GiB is free. Including non-PyTorch memory, ...")
    monkeypatch.setattr(pretrain.Pretrainer, "train", oom)
    assert main(["--preset", "tiny", "--max_steps", "2", "--checkpoint_dir", str(tmp_path / "ck")]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: out of GPU memory (tried to allocate 6.13 GiB on a GPU of 79.19 GiB)")
    assert "Traceback" not in err


def test_gpu_run_warns_before_it_starts_when_it_may_not_fit(tmp_path, capsys, monkeypatch):
    "On a CUDA machine, a run whose memory estimate exceeds the card is told so before training (and compiling) starts."
    from mamba3_lite import pretrain
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: SimpleNamespace(total_memory=80_000_000_000))
    monkeypatch.setattr(pretrain, "_train", lambda cfg, stage: 0)          # the plan only: no GPU here to train on
    for preset, warned in (("h200", True), ("a100", False)):
        assert main(["--preset", preset, "--model.mixer", "mamba3", "--checkpoint_dir", str(tmp_path / preset)]) == 0
        err = capsys.readouterr().err
        assert ("warning: memory: the estimate, 80.5 GB, exceeds the NVIDIA H100 80GB HBM3's 80 GB" in err) == warned, err
