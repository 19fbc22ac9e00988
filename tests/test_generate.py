"""`python -m mamba3_lite.generate` and `load_model` / `generate_text` on a real run folder: a few steps of the trainer on
Shakespeare's bytes, then every way to name what it wrote, the command line in a subprocess, and the one-line errors."""
import os, shutil, subprocess, sys
from pathlib import Path

import pytest
import torch

from mamba3_lite.generate import GenerateError, find_model, generate_text, load_model, main
from mamba3_lite.model import ModelConfig
from mamba3_lite.train.config import TrainingConfig
from mamba3_lite.train.trainer import Pretrainer
from test_training import byte_corpus

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
MODEL = dict(vocab_size=256, max_seq_len=32, d_model=32, n_layers=2, n_heads=2, head_dim=16, state_dim=8, chunk_size=16, ffn_dim=64)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    "A finished run: 12 steps on bytes, checkpoints at steps 4, 8 and 12 (two kept), final/ exported."
    d = tmp_path_factory.mktemp("gen")
    byte_corpus(d / "bytes")                                  # 60,000 train / 6,000 val bytes
    cfg = TrainingConfig(model=ModelConfig(**MODEL), data_path=str(d / "bytes"), checkpoint_dir=str(d / "run"), batch_size=4,
                         gradient_accumulation_steps=1, max_steps=12, warmup_steps=2, lr=3e-3, save_every=4, eval_every=4,
                         eval_batches=1, sample_tokens=0, keep_last=2, device="cpu")
    t = Pretrainer(cfg, echo=lambda m: None, progress=False)
    t.train(); t.close()
    return d / "run"


def cli(*args, stdin=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "mamba3_lite.generate", *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=ENV, timeout=timeout, cwd=REPO)


def test_every_way_to_name_the_model(run):
    assert find_model(run) == ("export", run / "final")
    assert find_model(run / "final" / "config.json") == ("export", run / "final")
    assert find_model(run / "step_00000008") == ("checkpoint", run / "step_00000008")
    (model, tok), (ck, tok_ck) = load_model(run), load_model(run / "step_00000012")
    assert tok.name == tok_ck.name == "bytes" and not model.training
    x = torch.tensor([list(b"ROMEO:")])
    with torch.no_grad(): assert torch.equal(model(x), ck(x))           # the export and the last checkpoint: the same weights


def test_unfinished_run_uses_its_newest_complete_checkpoint(run, tmp_path):
    part = tmp_path / "part"
    shutil.copytree(run, part, ignore=shutil.ignore_patterns("final"))
    (part / "step_00000012" / "COMPLETE").unlink()                     # a checkpoint cut short: never read
    assert find_model(part) == ("checkpoint", part / "step_00000008")


def test_old_export_without_tokenizer_json(run, tmp_path):
    "An export from before tokenizer.json: its run's config.json names the tokenizer; alone, the vocabulary does."
    for where in (tmp_path / "a" / "final", tmp_path / "b" / "export"):
        shutil.copytree(run / "final", where)
        (where / "tokenizer.json").unlink()
        sums = where / "SHA256SUMS"
        sums.write_text("".join(l + "\n" for l in sums.read_text().splitlines() if not l.endswith("tokenizer.json")))
    shutil.copy(run / "config.json", tmp_path / "a" / "config.json")
    assert load_model(tmp_path / "a" / "final")[1].name == "bytes"
    assert load_model(tmp_path / "b" / "export")[1].name == "bytes"


def test_generate_text_streams_and_seeds(run):
    model, tok = load_model(run)
    pieces = []
    a = generate_text(model, tok, "ROMEO:", max_new_tokens=40, seed=3, stream=pieces.append)
    assert "".join(pieces) == a and 0 < len(a) <= 40                  # 40 bytes: 40 characters at most (invalid UTF-8: U+FFFD)
    assert generate_text(model, tok, "ROMEO:", max_new_tokens=40, seed=3) == a
    assert generate_text(model, tok, "", max_new_tokens=5, seed=0) == generate_text(model, tok, "\n", max_new_tokens=5, seed=0)
    with pytest.raises(ValueError, match="temperature: must be"): generate_text(model, tok, "x", temperature=-0.5)


def test_cli_prompt_from_argv_and_stdin(run):
    r = cli(run, "ROMEO:", "--max_new_tokens", "30", "--seed", "0", "--temperature", "0.7", "--top_k", "20")
    assert r.returncode == 0, r.stderr
    model, tok = load_model(run)
    assert r.stdout == "ROMEO:" + generate_text(model, tok, "ROMEO:", 30, 0.7, 20, seed=0) + "\n"
    assert "export" in r.stderr and "tokenizer bytes" in r.stderr
    r = cli(run / "step_00000012", "--max_new_tokens", "10", "--seed", "0", stdin="JULIET:")
    assert r.returncode == 0 and r.stdout.startswith("JULIET:"), r.stderr
    r = cli(run, "-", "--max-new-tokens", "0", stdin="To be")
    assert (r.returncode, r.stdout) == (0, "To be\n")


@pytest.mark.parametrize("damage, message", [
    (lambda d: None, None),
    (lambda d: (d / "final" / "model.safetensors").write_bytes(b"\0" * 64), "model.safetensors: sha256"),
    (lambda d: (d / "final" / "config.json").unlink(), "config.json: missing"),
    (lambda d: (d / "final" / "tokenizer.json").write_text('{"tokenizer": "bpe-9000"}'), "tokenizer.json: sha256"),
    (lambda d: shutil.rmtree(d / "final") or [shutil.rmtree(p) for p in d.glob("step_*")], "no final/ and no complete checkpoint"),
])
def test_cli_errors_are_one_line(run, tmp_path, damage, message):
    d = tmp_path / "copy"
    shutil.copytree(run, d)
    damage(d)
    r = cli(d, "x", "--max_new_tokens", "3")
    if message is None: assert r.returncode == 0, r.stderr; return
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.startswith("error: ") and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_bad_options_and_paths(tmp_path, run, capsys):
    for argv, message in [([tmp_path / "nowhere"], "no such file or folder"), ([tmp_path], "not a run folder"),
                          ([run, "--temperature", "-1"], "temperature: must be"), ([run, "--top_k", "-3"], "top_k: must be"),
                          ([run, "--max_new_tokens", "-1"], "max_new_tokens: must be")]:
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err, err
    r = cli(tmp_path / "nowhere", "--debug")
    assert r.returncode == 2 and "Traceback" in r.stderr and "error: " in r.stderr


def test_cli_out_of_gpu_memory_is_one_line(run, capsys, monkeypatch):
    "PyTorch's out-of-memory report (a paragraph) as one line naming the two numbers and the way on; exit 2, no traceback."
    import mamba3_lite.generate as gen
    def too_big(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                     "7.79 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process ...")
    monkeypatch.setattr(gen, "generate_text", too_big)          # no GPU here to fill: the error as PyTorch raises it
    assert main([str(run), "x", "--max_new_tokens", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()          # the model's info line, then the error
    assert err[1:] == ["error: out of GPU memory (tried to allocate 2.00 GiB on a GPU of 7.79 GiB): free the GPU, "
                       "use a larger one or --device cpu"], err
