"""Issue 9 (reliability), the data half: `prepare` never loses a file it did not write, records what it wrote.

- `--overwrite` removes only what an earlier `prepare` wrote (the files its meta.json lists), never other files,
  and refuses an input that lies inside the output folder (case 4).
- meta.json records `content_sha256` (prepare and the built-in corpus); `PretrainDataset.content_sha256` exposes it,
  None for a folder prepared before it existed (case 5); a split too short for one window is a `ValueError` naming
  `max_seq_len` and the token count.
- A killed prepare's staging folder `.OUT.partial-*` is removed by the next run, and nothing else is; a replace
  interrupted between its two renames is completed; a UTF-8 error names the offset in the file (case 7).
- `python -m mamba3_lite.data` prints one `error: ...` line (no traceback unless --debug / MAMBA3_LITE_DEBUG=1)
  and exits 2 for a user error, 1 for a failure of the machine (disk full).
No test times anything.
"""
import errno, fcntl, gzip, hashlib, json, os, signal, socket, subprocess, sys, textwrap
from pathlib import Path

import numpy as np
import pytest

import mamba3_lite.data.corpus as C
import mamba3_lite.data.prepare as P
import mamba3_lite.data.shards as SH
import mamba3_lite.data.tokenizer as TK
from mamba3_lite.data.__main__ import main
from mamba3_lite.data.corpus import BUILTIN_CORPUS_FILE, builtin_corpus
from mamba3_lite.data.loader import PretrainDataset
from mamba3_lite.data.prepare import prepare
from mamba3_lite.data.shards import ShardError, write_shard
from mamba3_lite.data.tokenizer import GPT2_VOCAB_SIZE, assets_dir
from mamba3_lite.runtime import sha256_file

REPO = Path(TK.__file__).resolve().parents[2]
KW = dict(workers=1, progress=False)


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MAMBA3_LITE_DEBUG", None)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mamba3_lite.data", *map(str, args)], capture_output=True, text=True,
                          env=kw.pop("env", _env()), timeout=120, **kw)


def _snapshot(folder: Path) -> dict:
    "Every file and folder under `folder` (hidden ones too), with the bytes of each file."
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _dead_pid() -> int:
    "The id of a process that has ended."
    p = subprocess.Popen([sys.executable, "-c", "pass"]); p.wait()
    return p.pid


@pytest.fixture
def text(tmp_path) -> Path:
    p = tmp_path / "in" / "doc.txt"; p.parent.mkdir()
    p.write_text("To be, or not to be, that is the question. " * 40, encoding="utf-8")
    return p


@pytest.fixture
def prepared(tmp_path, text) -> Path:
    "A previous output of prepare: three train shards and a meta.json."
    out = tmp_path / "out"
    prepare([text], out, val_fraction=0, shard_tokens=200, **KW)
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train_000000.bin", "train_000001.bin", "train_000002.bin"]
    return out


# ---------------------------------------------------------------------------------------------- case 4: --overwrite

def test_overwrite_refuses_an_input_inside_the_output(prepared, text, capsys):
    "Case 4: `prepare DIR/raw.txt --out DIR --overwrite` used to delete the input with the old output."
    (prepared / "raw.txt").write_bytes(text.read_bytes())
    (prepared / "raw").mkdir(); (prepared / "raw" / "more.txt").write_text("more text")
    before = _snapshot(prepared)
    for inputs in ([prepared / "raw.txt"], [prepared / "raw"], [prepared]):
        with pytest.raises(ValueError, match="inside the output folder") as e:
            prepare(inputs, prepared, overwrite=True, **KW)
        assert str(prepared) in str(e.value)
        assert _snapshot(prepared) == before and _hidden(prepared.parent) == []
    assert main(["prepare", str(prepared / "raw.txt"), "--out", str(prepared), "--overwrite", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "inside the output folder" in err, err
    assert _snapshot(prepared) == before


def test_overwrite_refuses_files_prepare_did_not_write(prepared):
    "Case 4: unrelated files and folders in DIR (and a shard that meta.json does not list) are never removed."
    (prepared / "notes.txt").write_text("precious")
    (prepared / "runs").mkdir(); (prepared / "runs" / "log").write_text("a run")
    (prepared / "train_000007.bin").write_bytes((prepared / "train_000000.bin").read_bytes())   # not listed
    before = _snapshot(prepared)
    with pytest.raises(FileExistsError) as e:
        prepare([prepared.parent / "in"], prepared, overwrite=True, **KW)
    msg = str(e.value)
    assert "did not write" in msg and all(n in msg for n in ("notes.txt", "runs", "train_000007.bin")), msg
    assert _snapshot(prepared) == before and _hidden(prepared.parent) == []


def test_overwrite_replaces_only_what_meta_lists(prepared, text):
    "A previous output (only its listed files) is replaced; the new output has exactly its own files."
    prepare([text], prepared, val_fraction=0, shard_tokens=10_000, overwrite=True, **KW)
    assert sorted(p.name for p in prepared.iterdir()) == ["meta.json", "train_000000.bin"]
    assert _hidden(prepared.parent) == []


def test_a_file_that_appears_during_an_overwrite_survives(prepared, text, monkeypatch):
    "A file put into DIR after prepare checked it (while it tokenizes) is kept, at its path."
    real = P._tokenize_into
    def tokenize(*a, **k):
        (prepared / "late.txt").write_text("written while prepare ran")
        return real(*a, **k)
    monkeypatch.setattr(P, "_tokenize_into", tokenize)
    prepare([text], prepared, val_fraction=0, shard_tokens=10_000, overwrite=True, **KW)
    assert (prepared / "late.txt").read_text() == "written while prepare ran"
    assert sorted(p.name for p in prepared.iterdir()) == ["late.txt", "meta.json", "train_000000.bin"]
    assert _hidden(prepared.parent) == []


# ---------------------------------------------------------------------------------------------- case 5: content hash

def _listing_sha256(folder: Path) -> str:
    "What `cd folder && sha256sum train_*.bin val_*.bin | sha256sum` prints: the hash of the shards in name order."
    files = sorted(p for p in folder.iterdir() if p.name.endswith(".bin"))
    return hashlib.sha256("".join(f"{sha256_file(p)}  {p.name}\n" for p in files).encode()).hexdigest()


def test_meta_records_content_sha256(tmp_path, text):
    out = tmp_path / "o"
    meta = prepare([text, tmp_path / "in"], out, val_fraction=0.5, shard_tokens=200, **KW)
    on_disk = json.loads((out / "meta.json").read_text())
    assert meta["content_sha256"] == on_disk["content_sha256"] == _listing_sha256(out)
    for split in ("train", "val"):
        for s in on_disk["shards"][split]: assert s["sha256"] == sha256_file(out / s["file"]), s
        assert PretrainDataset(out, 8, GPT2_VOCAB_SIZE, split=split).content_sha256 == meta["content_sha256"]


def test_same_size_different_data_has_another_hash(tmp_path):
    "Case 5: re-tokenised data with the same shard names and token counts is told apart by the hash."
    (tmp_path / "a.txt").write_text("Hello world " * 50); (tmp_path / "b.txt").write_text("Hello there " * 50)
    ma = prepare([tmp_path / "a.txt"], tmp_path / "A", val_fraction=0, **KW)
    mb = prepare([tmp_path / "b.txt"], tmp_path / "B", val_fraction=0, **KW)
    assert ma["tokens"] == mb["tokens"] and [s["file"] for s in ma["shards"]["train"]] == [s["file"] for s in mb["shards"]["train"]]
    da, db = (PretrainDataset(tmp_path / n, 16, GPT2_VOCAB_SIZE) for n in "AB")
    assert da.n_tokens == db.n_tokens and da.content_sha256 != db.content_sha256 and None not in (da.content_sha256, db.content_sha256)


def test_content_sha256_is_none_for_old_folders(prepared, tmp_path):
    meta = json.loads((prepared / "meta.json").read_text())
    del meta["content_sha256"]
    (prepared / "meta.json").write_text(json.dumps(meta))                       # prepared before the hash was recorded
    assert PretrainDataset(prepared, 8, GPT2_VOCAB_SIZE).content_sha256 is None
    bare = tmp_path / "bare"; bare.mkdir()
    write_shard(bare / "train_000000.bin", np.arange(100), GPT2_VOCAB_SIZE)    # shards without a meta.json
    assert PretrainDataset(bare, 8, GPT2_VOCAB_SIZE).content_sha256 is None
    assert PretrainDataset(bare / "train_000000.bin", 8, GPT2_VOCAB_SIZE).content_sha256 is None   # one file


@pytest.fixture
def small_assets(tmp_path, monkeypatch) -> Path:
    "Package data whose built-in corpus is 2 short works: quick to build."
    import lzma
    a = tmp_path / "assets"; a.mkdir()
    (a / "gpt2.tiktoken").symlink_to(assets_dir() / "gpt2.tiktoken")
    with lzma.open(a / BUILTIN_CORPUS_FILE, "wt", encoding="utf-8") as f:
        for t in ("First work. " * 200, "Second work. " * 200): f.write(json.dumps({"title": t[:6], "text": t}) + "\n")
    for module in (TK, C): monkeypatch.setattr(module, "assets_dir", lambda: a)
    return a


def test_builtin_corpus_records_content_sha256(small_assets, tmp_path):
    root = builtin_corpus(tmp_path / "cache")
    meta = json.loads((root / "meta.json").read_text())
    assert meta["content_sha256"] == _listing_sha256(root)
    assert PretrainDataset(root, 16, GPT2_VOCAB_SIZE).content_sha256 == meta["content_sha256"]


def test_too_short_split_names_max_seq_len_and_tokens(prepared):
    n = json.loads((prepared / "meta.json").read_text())["tokens"]["train"]
    for T in (n, 10**8, 2**70):                                                   # a window needs max_seq_len + 1 tokens
        with pytest.raises(ValueError) as e:
            PretrainDataset(prepared, T, GPT2_VOCAB_SIZE, val_fraction=0)
        assert "max_seq_len" in str(e.value) and f"{n:,} tokens" in str(e.value), str(e.value)
    assert len(PretrainDataset(prepared, n - 1, GPT2_VOCAB_SIZE, val_fraction=0)) == 1


@pytest.mark.parametrize("bad", [2.5, 8.0, True, 0, -3, "8", None])
def test_max_seq_len_must_be_a_positive_integer(prepared, bad):
    with pytest.raises(ValueError, match="max_seq_len"):
        PretrainDataset(prepared, bad, GPT2_VOCAB_SIZE)


# ---------------------------------------------------------------------------------------------- case 7: stale staging

KILL_AFTER_FIRST_SHARD = textwrap.dedent("""
    import os, signal, sys
    import mamba3_lite.data.prepare as P
    real = P._SplitWriter._finish
    def finish(self):
        real(self); os.kill(os.getpid(), signal.SIGKILL)       # kill -9 once the first shard is on disk
    P._SplitWriter._finish = finish
    P.prepare([sys.argv[1]], sys.argv[2], val_fraction=0, shard_tokens=100, workers=1, progress=False)
""")


def test_stale_staging_of_a_killed_prepare_is_removed(tmp_path, text, capsys):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_SHARD, str(text), str(out)], env=_env(), timeout=120)
    assert r.returncode == -signal.SIGKILL
    stale = [p for p in tmp_path.glob(".out.partial-*")]
    assert len(stale) == 1 and (stale[0] / "train_000000.bin").is_file() and not out.exists()
    prepare([text], out, val_fraction=0, **KW)
    err = capsys.readouterr().err
    assert not stale[0].exists() and _hidden(tmp_path) == []
    assert f"removed {stale[0]}" in err and err.count("\n") == 1, err
    assert PretrainDataset(out, 8, GPT2_VOCAB_SIZE).n_tokens > 100


def test_start_up_cleaning_touches_nothing_else(tmp_path, text, capsys):
    host, dead = socket.gethostname(), _dead_pid()
    def staging(name):
        p = tmp_path / name; p.mkdir(); (p / "train_000000.bin").write_bytes(b"x"); return p
    keep = [staging(f".out.partial-{host}-{os.getpid()}-0123abcd"),        # a live prepare on this machine
            staging(f".out.partial-otherhost-{dead}-0123abcd"),            # another machine's: its pid means nothing here
            staging(f".other.partial-{host}-{dead}-0123abcd"),             # the staging of another output
            staging(".out.partial-mine"), staging(f".out.partial-{host}-{dead}-0123abcd.bak")]
    foreign = staging(f".out.partial-{host}-{dead}-feedf00d"); (foreign / "thesis.tex").write_text("precious")
    held = staging(f".out.partial-{host}-{dead}-deadbeef")                 # its lock is held: a prepare is using it
    fd = os.open(held, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)
    stale = staging(f".out.partial-{host}-{dead}-0badf00d")
    (stale / f".train_000001.bin.tmp-{dead}-0123abcd").write_bytes(b"\0" * 40)
    (tmp_path / ".out.notes").write_text("mine")
    before = {p.name: _snapshot(p) for p in [*keep, foreign, held]}
    try:
        prepare([text], tmp_path / "out", val_fraction=0, **KW)
    finally:
        os.close(fd)
    assert not stale.exists() and (tmp_path / ".out.notes").read_text() == "mine"
    assert {p.name: _snapshot(p) for p in [*keep, foreign, held]} == before
    err = capsys.readouterr().err
    assert f"removed {stale}" in err and str(foreign) in err and "did not write" in err, err


def test_a_replace_interrupted_between_its_renames_is_recovered(prepared, text, capsys):
    "A kill after the old output was moved aside and before the new one took its name: the old one comes back."
    host, dead = socket.gethostname(), _dead_pid()
    before = _snapshot(prepared)
    aside = prepared.with_name(f".out.old-{host}-{dead}-0123abcd")
    os.rename(prepared, aside)
    with pytest.raises(FileExistsError, match="not empty"):
        prepare([text], prepared, val_fraction=0, **KW)                   # no --overwrite: the old output is kept
    assert _snapshot(prepared) == before and _hidden(prepared.parent) == []
    assert f"restored {prepared}" in capsys.readouterr().err


def test_utf8_error_names_the_offset_in_the_file(tmp_path):
    "Case 7: the offset of a bad byte in a big file is counted from the start of the file, not of a block."
    big = tmp_path / "big.txt"; big.write_bytes(b"ab\n" * 2_000_000 + b"caf\xe9\n")
    with pytest.raises(ValueError) as e:
        prepare([big], tmp_path / "o", **KW)
    assert "big.txt: not UTF-8 text" in str(e.value) and "byte 6,000,003" in str(e.value) and "line 2,000,001" in str(e.value), str(e.value)
    j = tmp_path / "x.jsonl"; j.write_bytes(b'{"text": "ok"}\n{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"x.jsonl: not UTF-8 text .*byte 43.*line 3"):
        prepare([j], tmp_path / "o", **KW)
    with gzip.open(tmp_path / "z.txt.gz", "wb") as f: f.write(b"x" * 100 + b"\xff")
    with pytest.raises(ValueError, match=r"z.txt.gz: not UTF-8 text .*byte 100 of the decompressed"):
        prepare([tmp_path / "z.txt.gz"], tmp_path / "o", **KW)
    assert not (tmp_path / "o").exists() and _hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------- the CLI: one line

def _one_error_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err[len("error: "):-1]


def test_cli_user_errors_are_one_line_and_exit_2(tmp_path, prepared, text, capsys):
    (tmp_path / "garbage.bin").write_bytes(b"garbage" * 10)
    (tmp_path / "latin1.txt").write_bytes("Ophélie".encode("latin-1"))
    (tmp_path / "afile").write_text("x")
    cases = [(["info", tmp_path / "garbage.bin"], "garbage.bin: not a mamba3_lite token shard"),        # ShardError
             (["prepare", tmp_path / "latin1.txt", "--out", tmp_path / "o1"], "latin1.txt: not UTF-8 text"),  # ValueError
             (["prepare", text, "--out", prepared], "exists and is not empty"),                        # FileExistsError
             (["prepare", tmp_path / "nope.txt", "--out", tmp_path / "o2"], "input not found"),       # FileNotFoundError
             (["info", tmp_path / "nope.bin"], f"No such file or directory ({tmp_path / 'nope.bin'})"),
             (["prepare", text, "--out", tmp_path / "afile" / "o"], f"{tmp_path / 'afile'} is a file"),   # a file in the way
             ]
    for args, fragment in cases:
        assert main([*map(str, args), *(["--no-progress"] if args[0] == "prepare" else [])]) == 2, args
        assert fragment in _one_error_line(capsys.readouterr().err), args
    r = _cli("info", tmp_path / "garbage.bin")                                # and in a real process: no traceback
    assert r.returncode == 2 and _one_error_line(r.stderr).startswith(str(tmp_path / "garbage.bin")), r.stderr


@pytest.mark.parametrize("code, status", [(errno.ENOSPC, 1), (errno.EACCES, 2), (errno.EROFS, 2)])
def test_cli_os_errors_name_the_path(tmp_path, text, monkeypatch, capsys, code, status):
    "Disk full, permission denied, read-only file system: one line naming the folder, nothing left behind."
    def write(self, tokens): raise OSError(code, os.strerror(code))     # what a full disk raises inside write(): no path
    monkeypatch.setattr(SH.ShardWriter, "write", write)
    out = tmp_path / "out"
    assert main(["prepare", str(text), "--out", str(out), "--no-progress"]) == status
    assert _one_error_line(capsys.readouterr().err) == f"{os.strerror(code)} ({out})"
    assert not out.exists() and _hidden(tmp_path) == []


def test_cli_permission_error_names_the_path(tmp_path, text, monkeypatch, capsys):
    real = Path.mkdir
    def mkdir(self, *a, **k):
        if ".partial-" in self.name: raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    assert main(["prepare", str(text), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("Permission denied (") and str(tmp_path) in line, line


def test_cli_debug_shows_the_traceback(tmp_path, monkeypatch):
    (tmp_path / "garbage.bin").write_bytes(b"garbage" * 10)
    with pytest.raises(ShardError):
        main(["info", str(tmp_path / "garbage.bin"), "--debug"])
    monkeypatch.setenv("MAMBA3_LITE_DEBUG", "1")
    with pytest.raises(ShardError):
        main(["info", str(tmp_path / "garbage.bin")])
    r = _cli("info", tmp_path / "garbage.bin", env=_env(MAMBA3_LITE_DEBUG="1"))
    assert r.returncode != 0 and "Traceback" in r.stderr and "ShardError" in r.stderr, r.stderr
