"""Tests for mamba3_lite.data (chapter 06, notebooks 06a-06g): what the notebooks can't test well.

Every bad input, byte-identical output, interrupted runs, sampler resume and DDP sharding, the CLI
through a subprocess, and the package from an installed location. No test times anything.
"""
import builtins, gzip, json, lzma, os, pickle, random, runpy, shutil, signal, socket, struct, subprocess, sys, threading, time
from pathlib import Path

import numpy as np
import pytest
import torch

import mamba3_lite.data.corpus as C
import mamba3_lite.data.prepare as P
import mamba3_lite.data.sources as S
import mamba3_lite.data.tokenizer as TK
from mamba3_lite.data.__main__ import main
from mamba3_lite.data.corpus import BUILTIN_CORPUS_FILE, builtin_corpus
from mamba3_lite.data.loader import PretrainDataset, ResumableSampler, batches, shuffled_order
from mamba3_lite.data.prepare import prepare
from mamba3_lite.data.shards import ShardError, read_shard, shard_info, write_shard
from mamba3_lite.data.tokenizer import EOT_ID, GPT2_VOCAB_SIZE, assets_dir, get_tokenizer, load_ranks

REPO = Path(TK.__file__).resolve().parents[2]


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


def _cli(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mamba3_lite.data", *map(str, args)], capture_output=True, text=True,
                          env=kw.pop("env", _env()), timeout=timeout, **kw)


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _tree(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="session")
def works() -> list[dict]:
    with lzma.open(assets_dir() / BUILTIN_CORPUS_FILE, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def inputs(tmp_path_factory, works) -> Path:
    "A folder of every input format, in a known sorted order."
    import pyarrow as pa, pyarrow.parquet as pq
    root = tmp_path_factory.mktemp("inputs") / "corpus"
    (root / "b").mkdir(parents=True)
    (root / "a.txt").write_text(works[0]["text"], encoding="utf-8")                                   # 1 document
    with open(root / "b" / "c.jsonl", "w", encoding="utf-8") as f:                                      # 3 documents
        for w in works[1:3]: f.write(json.dumps({"text": w["text"], "title": w["title"]}) + "\n")
        f.write("\n" + json.dumps({"text": None}) + "\n" + json.dumps({"text": "café ☕ <|endoftext|> 𝄞"}) + "\n")
    pq.write_table(pa.table({"text": [w["text"] for w in works[3:7]] + [None, ""]}), root / "d.parquet")   # 4
    with gzip.open(root / "e.txt.gz", "wt", encoding="utf-8") as f: f.write("Line one.\r\nLine two.\r\n")    # 1
    with lzma.open(root / "f.jsonl.xz", "wt", encoding="utf-8") as f:                                   # 2
        for w in works[7:9]: f.write(json.dumps({"text": w["text"]}) + "\n")
    (root / ".hidden.txt").write_text("never read")
    (root / "notes.md").write_text("not an input")
    return root


def _expected_docs(works) -> list[str]:
    "The documents of `inputs`, in the order prepare must read them."
    return ([works[0]["text"]] + [w["text"] for w in works[1:3]] + ["café ☕ <|endoftext|> 𝄞"]
            + [w["text"] for w in works[3:7]] + ["Line one.\r\nLine two.\r\n"] + [w["text"] for w in works[7:9]])


def _split_tokens(folder: Path, split: str) -> np.ndarray:
    files = sorted(folder.glob(f"{split}_*.bin"))
    return np.concatenate([read_shard(f) for f in files]) if files else np.zeros(0, np.uint16)


# ---------------------------------------------------------------------------------------------- tokenizer

def test_tokenizer_is_gpt2_and_offline(monkeypatch):
    def no_network(*a, **k): raise AssertionError("the tokenizer touched the network")
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    get_tokenizer.cache_clear()
    try:
        enc = get_tokenizer()
        assert (enc.name, enc.n_vocab, enc.eot_token, EOT_ID) == ("gpt2", 50257, 50256, 50256)
        assert enc.encode("Hello world") == [15496, 995]
        assert enc.encode(" said the Ghost, 'tis 2024!") == enc.encode_ordinary(" said the Ghost, 'tis 2024!")
        assert get_tokenizer() is enc
    finally:
        get_tokenizer.cache_clear()


def test_tokenizer_round_trips_random_unicode():
    enc, rng = get_tokenizer(), random.Random(0)
    for _ in range(1000):
        chars = [chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 40))]
        s = "".join("?" if 0xD800 <= ord(c) <= 0xDFFF else c for c in chars)   # surrogates are not text
        assert enc.decode(enc.encode_ordinary(s)) == s, repr(s)


def test_rank_file_checksum_is_enforced(tmp_path):
    bad = tmp_path / "gpt2.tiktoken"
    bad.write_bytes((assets_dir() / "gpt2.tiktoken").read_bytes().replace(b" 0\n", b" 1\n", 1))
    with pytest.raises(ValueError, match="not the GPT-2 rank file"):
        load_ranks(bad)


# ---------------------------------------------------------------------------------------------- shards

def _good(tmp_path) -> Path:
    return write_shard(tmp_path / "good.bin", [EOT_ID, 1, 2, 50255], GPT2_VOCAB_SIZE)


BAD_SHARDS = {
    "wrong_magic": (lambda b: b"XXXXXXXX" + b[8:], "not a mamba3_lite token shard"),
    "zero_magic": (lambda b: b"\0" * 8 + b[8:], "not a mamba3_lite token shard"),
    "wrong_version": (lambda b: b[:8] + struct.pack("<I", 99) + b[12:], "unsupported shard version 99"),
    "wrong_dtype": (lambda b: b[:12] + struct.pack("<I", 3) + b[16:], "unknown dtype"),
    "empty_file": (lambda b: b"", "truncated"),
    "truncated_header": (lambda b: b[:31], "truncated"),
    "truncated_data": (lambda b: b[:-1], "truncated"),
    "count_larger_than_data": (lambda b: b[:16] + struct.pack("<Q", 5) + b[24:], "truncated"),
    "count_smaller_than_data": (lambda b: b[:16] + struct.pack("<Q", 3) + b[24:], "count mismatch"),
    "trailing_bytes": (lambda b: b + b"\0\0", "count mismatch"),
    "odd_trailing_byte": (lambda b: b + b"\0", "count mismatch"),
    "token_ge_header_vocab": (lambda b: b[:24] + struct.pack("<Q", 100) + b[32:], "token id 50,256 at position 0 is >= the vocabulary size 100"),
    "corrupt_token": (lambda b: b[:34] + struct.pack("<H", 60000) + b[36:], "token id 60,000 at position 1"),
    "vocab_does_not_fit_dtype": (lambda b: b[:24] + struct.pack("<Q", 70000) + b[32:], "does not fit 2-byte tokens"),
    "zero_vocab": (lambda b: b[:24] + struct.pack("<Q", 0) + b[32:], "vocab size 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_SHARDS))
def test_read_shard_rejects(tmp_path, case):
    mutate, fragment = BAD_SHARDS[case]
    path = tmp_path / f"{case}.bin"
    path.write_bytes(mutate(_good(tmp_path).read_bytes()))
    with pytest.raises(ShardError) as err:
        read_shard(path)
    msg = str(err.value)
    assert isinstance(err.value, ValueError) and err.value.path == path
    assert msg.startswith(f"{path}: ") and fragment in msg, msg


def test_read_shard_model_vocab_and_missing_file(tmp_path):
    good = _good(tmp_path)
    with pytest.raises(ShardError, match=r"larger than vocab_size=50,000"):
        read_shard(good, vocab_size=50_000)
    assert read_shard(good, vocab_size=50_304).tolist() == [EOT_ID, 1, 2, 50255]   # a padded model vocabulary is fine
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        read_shard(tmp_path / "missing.bin")
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        shard_info(tmp_path / "missing.bin")


def test_write_shard_format(tmp_path):
    p = _good(tmp_path)
    raw = p.read_bytes()
    assert raw[:32] == struct.pack("<8sIIQQ", b"M3LTOKEN", 1, 2, 4, 50257) and len(raw) == 32 + 8
    assert np.frombuffer(raw[32:], "<u2").tolist() == [EOT_ID, 1, 2, 50255]
    t = read_shard(p)
    assert isinstance(t, np.memmap) and t.dtype == np.dtype("<u2") and not t.flags.writeable
    big = write_shard(tmp_path / "u32.bin", np.array([0, 99_999, 65_536]), 100_000)
    assert shard_info(big)["dtype"] == "uint32" and read_shard(big).tolist() == [0, 99_999, 65_536]
    assert write_shard(tmp_path / "edge.bin", [65_535], 65_536).read_bytes()[12:16] == struct.pack("<I", 2)
    empty = write_shard(tmp_path / "empty.bin", [], GPT2_VOCAB_SIZE)
    assert len(read_shard(empty)) == 0 and shard_info(empty)["tokens"] == 0
    assert _hidden(tmp_path) == []


def test_write_shard_is_atomic(tmp_path, monkeypatch):
    p = _good(tmp_path)
    before = p.read_bytes()
    for bad in ([1, GPT2_VOCAB_SIZE], [-1, 2], [1.5]):
        with pytest.raises(ValueError, match="good.bin"):
            write_shard(p, bad, GPT2_VOCAB_SIZE)
    assert p.read_bytes() == before and _hidden(tmp_path) == []

    def crash(*a, **k): raise OSError("simulated crash before the rename")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        write_shard(p, [7, 8, 9], GPT2_VOCAB_SIZE)
    with pytest.raises(OSError):
        write_shard(tmp_path / "new.bin", [7], GPT2_VOCAB_SIZE)
    monkeypatch.undo()
    assert p.read_bytes() == before and not (tmp_path / "new.bin").exists() and _hidden(tmp_path) == []
    write_shard(p, [7, 8, 9], GPT2_VOCAB_SIZE)                    # replacing works
    assert read_shard(p).tolist() == [7, 8, 9]


# ---------------------------------------------------------------------------------------------- prepare

def test_prepare_content_matches_tiktoken(inputs, works, tmp_path):
    enc = get_tokenizer()
    meta = prepare([inputs], tmp_path / "out", val_fraction=0.2, shard_tokens=100_000, workers=2, progress=False)
    docs = _expected_docs(works)
    want = {"train": [], "val": []}
    for i, doc in enumerate(docs):                     # the rule: document i is val when floor((i+1)f) > floor(if)
        want["val" if int((i + 1) * 0.2) > int(i * 0.2) else "train"] += [EOT_ID] + enc.encode_ordinary(doc)
    for split in ("train", "val"):
        got = _split_tokens(tmp_path / "out", split)
        assert got.tolist() == want[split], split
        assert meta["tokens"][split] == len(want[split])
        assert all(s["tokens"] <= 100_000 for s in meta["shards"][split])
    assert meta["documents"] == {"train": 9, "val": 2}                  # 11 documents: the 5th and 10th are val
    assert [i["file"] for i in meta["inputs"]] == ["a.txt", "b/c.jsonl", "d.parquet", "e.txt.gz", "f.jsonl.xz"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == (
        ["meta.json"] + [s["file"] for s in meta["shards"]["train"]] + [s["file"] for s in meta["shards"]["val"]])
    assert _hidden(tmp_path) == []


def test_prepare_is_byte_identical(inputs, tmp_path, monkeypatch):
    kw = dict(val_fraction=0.1, shard_tokens=60_000, progress=False)
    prepare([inputs], tmp_path / "w1", workers=1, **kw)
    prepare([inputs], tmp_path / "w1_again", workers=0, **kw)
    prepare([inputs], tmp_path / "w2", workers=2, **kw)
    monkeypatch.setattr(P, "_PIECE_CHARS", 4000)      # much smaller pieces and tasks: hundreds of cuts, same tokens
    monkeypatch.setattr(P, "_TASK_CHARS", 20_000)
    prepare([inputs], tmp_path / "w3_small_pieces", workers=3, **kw)
    ref = _tree(tmp_path / "w1")
    assert len(ref) > 3
    for other in ("w1_again", "w2", "w3_small_pieces"):
        assert _tree(tmp_path / other) == ref, other


BAD_INPUTS = {
    "missing": (lambda d: [d / "nope.txt"], FileNotFoundError, "input not found"),
    "unsupported": (lambda d: [d / "x.md"], ValueError, "unsupported input"),
    "empty_folder": (lambda d: [d / "emptydir"], ValueError, "no .txt, .jsonl or .parquet files"),
    "invalid_json": (lambda d: [d / "invalid.jsonl"], ValueError, "invalid.jsonl:2: invalid JSON"),
    "no_text_field": (lambda d: [d / "notext.jsonl"], ValueError, 'notext.jsonl:1: no "text" field'),
    "text_not_string": (lambda d: [d / "number.jsonl"], ValueError, '"text" is int, not a string'),
    "parquet_no_text": (lambda d: [d / "notext.parquet"], ValueError, 'notext.parquet: no "text" column'),
    "parquet_text_int": (lambda d: [d / "int.parquet"], ValueError, 'column "text" has type int64'),
    "not_utf8": (lambda d: [d / "latin1.txt"], ValueError, "latin1.txt: not UTF-8 text"),
    "only_empty_documents": (lambda d: [d / "empty.txt"], ValueError, "no documents found"),
    "no_inputs": (lambda d: [], ValueError, "no inputs given"),
    "hf_without_name": (lambda d: ["hf:"], ValueError, "expected hf:NAME"),
}


@pytest.fixture
def bad_inputs(tmp_path) -> Path:
    import pyarrow as pa, pyarrow.parquet as pq
    d = tmp_path / "bad"
    (d / "emptydir").mkdir(parents=True)
    (d / "x.md").write_text("x")
    (d / "invalid.jsonl").write_text('{"text": "ok"}\n{"text": \n')
    (d / "notext.jsonl").write_text('{"body": "x"}\n')
    (d / "number.jsonl").write_text('{"text": 3}\n')
    pq.write_table(pa.table({"body": ["x"]}), d / "notext.parquet")
    pq.write_table(pa.table({"text": [1, 2]}), d / "int.parquet")
    (d / "latin1.txt").write_bytes("Ophélie".encode("latin-1"))
    (d / "empty.txt").write_text("")
    return d


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_prepare_rejects_bad_inputs(bad_inputs, case):
    make, exc, fragment = BAD_INPUTS[case]
    out = bad_inputs.parent / "out"
    with pytest.raises(exc) as err:
        prepare(make(bad_inputs), out, workers=2, progress=False)
    assert fragment in str(err.value), str(err.value)
    assert not out.exists() and _hidden(bad_inputs.parent) == []


@pytest.mark.parametrize("kw, fragment", [(dict(val_fraction=1.0), "val_fraction"), (dict(val_fraction=-0.1), "val_fraction"),
                                          (dict(shard_tokens=0), "shard_tokens"), (dict(shard_tokens=2.5), "shard_tokens"),
                                          (dict(workers=-1), "workers")])
def test_prepare_rejects_bad_options(inputs, tmp_path, kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        prepare([inputs], tmp_path / "out", progress=False, **kw)
    assert not (tmp_path / "out").exists()


def test_prepare_output_folder_rules(inputs, tmp_path):
    kw = dict(val_fraction=0.1, workers=1, progress=False)
    (tmp_path / "empty").mkdir()
    prepare([inputs / "a.txt"], tmp_path / "empty", **kw)                 # an existing empty folder is fine
    assert (tmp_path / "empty" / "meta.json").is_file()
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        prepare([inputs], tmp_path / "empty", **kw)
    prepare([inputs], tmp_path / "empty", overwrite=True, **kw)           # a previous output is replaced
    assert json.loads((tmp_path / "empty" / "meta.json").read_text())["documents"]["train"] == 10
    (tmp_path / "mine").mkdir(); (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError, match="not an output of prepare"):
        prepare([inputs], tmp_path / "mine", overwrite=True, **kw)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a folder"):
        prepare([inputs], tmp_path / "file", **kw)
    assert _hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------- hf: inputs

def test_hf_fails_fast_here(tmp_path):
    "This machine is offline and has no `datasets`: an hf: input fails at once, through the API and the CLI."
    if S.hub_problem(timeout=2) is None:
        pytest.skip("the Hugging Face Hub is reachable from here")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^hf:roneneldan/TinyStories: cannot stream a Hugging Face dataset"):
        prepare(["hf:roneneldan/TinyStories"], tmp_path / "out", progress=False)
    assert time.monotonic() - t0 < 10                      # a hang guard, not a timing: offline it takes well under 1 s
    r = _cli("prepare", "hf:roneneldan/TinyStories:default", "--out", tmp_path / "out", timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("error: hf:roneneldan/TinyStories:default: cannot stream"), r.stderr
    assert not (tmp_path / "out").exists() and _hidden(tmp_path) == []


@pytest.fixture
def fake_datasets(monkeypatch):
    "Pretend `datasets` is installed (so the network probe runs); it must never be used."
    import types
    mod = types.ModuleType("datasets")
    def load_dataset(*a, **k): raise AssertionError("load_dataset must not be reached")
    mod.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", mod)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    return mod


def test_hf_without_datasets_package(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)           # import datasets -> ImportError
    with pytest.raises(RuntimeError, match=r"`datasets` package is not installed"):
        prepare(["hf:user/name"], tmp_path / "out", progress=False)


def test_hf_offline_mode(fake_datasets, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="HF_DATASETS_OFFLINE is set"):
        prepare(["hf:user/name"], tmp_path / "out", progress=False)


def test_hf_unreachable_endpoint_fails_fast(fake_datasets, monkeypatch, tmp_path):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()     # nothing listens there
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="cannot reach http://127.0.0.1"):
        prepare(["hf:user/name"], tmp_path / "out", progress=False)
    assert time.monotonic() - t0 < 10                      # hang guard


def test_hf_silent_endpoint_times_out(fake_datasets, monkeypatch, tmp_path):
    "A server that accepts connections but never answers must not hang prepare."
    server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(8)
    conns = []
    stop = threading.Event()
    def accept():
        server.settimeout(0.1)
        while not stop.is_set():
            try: conns.append(server.accept()[0])
            except OSError: pass
    t = threading.Thread(target=accept, daemon=True); t.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setattr(S, "HF_PROBE_TIMEOUT", 0.5)
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"no answer from|cannot reach"):
            prepare(["hf:user/name"], tmp_path / "out", progress=False)
        assert time.monotonic() - t0 < 10                  # hang guard: the probe gives up after 0.5 + 1 s
    finally:
        stop.set(); t.join(); server.close()
        for c in conns: c.close()


def test_hf_reachable_hub_passes_the_check(fake_datasets, monkeypatch):
    "Any HTTP answer counts as reachable (then `datasets` takes over)."
    from http.server import BaseHTTPRequestHandler, HTTPServer
    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self): self.send_response(404); self.end_headers()
        def log_message(self, *a): pass
    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True); t.start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{httpd.server_port}")
        assert S.hub_problem(timeout=5) is None
        assert S.resolve_inputs(["hf:user/name:cfg"]) == [dict(spec="hf:user/name:cfg", kind="hf", name="user/name", config="cfg")]
    finally:
        httpd.shutdown(); httpd.server_close()


# ---------------------------------------------------------------------------------------------- interrupted runs

def test_interrupted_prepare_leaves_nothing(inputs, tmp_path, monkeypatch):
    real = S.documents                                                 # prepare reads its inputs through this name
    def documents(src):
        for i, doc in enumerate(real(src)):
            if src["kind"] == "parquet" and i == 2: raise KeyboardInterrupt   # Ctrl-C half-way through
            yield doc
    monkeypatch.setattr(P, "documents", documents)
    with pytest.raises(KeyboardInterrupt):
        prepare([inputs], tmp_path / "out", shard_tokens=20_000, workers=2, progress=False)
    assert not (tmp_path / "out").exists() and _hidden(tmp_path) == []


@pytest.fixture(scope="module")
def big_txt(tmp_path_factory, works) -> Path:
    "~30 MB of text: several seconds of tokenizing on 2 cores, so a run can be stopped in the middle."
    p = tmp_path_factory.mktemp("big") / "big.txt"
    text = "\n\n".join(w["text"] for w in works)
    p.write_text("\n\n".join([text] * 6), encoding="utf-8")
    return p


def _start_prepare(big_txt, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mamba3_lite.data", "prepare", str(big_txt), "--out", str(out),
                             "--shard-tokens", "100000", "--workers", "2", "--no-progress"],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_shards(proc, parent: Path, n: int = 2) -> list[Path]:
    "Wait until the run's staging folder holds `n` finished shards; return the staging folders."
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        staging = [p for p in parent.glob(".out.partial-*") if p.is_dir()]
        if staging and len(list(staging[0].glob("train_*.bin"))) >= n: return staging
        assert proc.poll() is None, f"prepare ended before it could be interrupted: {proc.communicate()}"
        time.sleep(0.02)
    raise AssertionError("prepare made no progress")


def test_killed_prepare_leaves_no_acceptable_partial_output(big_txt, tmp_path):
    out = tmp_path / "out"
    proc = _start_prepare(big_txt, out)
    try:
        staging = _wait_for_shards(proc, tmp_path)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)                # kill -9 the run and its workers
        proc.communicate()
    assert not out.exists()                                # nothing under the output's name
    with pytest.raises(FileNotFoundError):
        PretrainDataset(out, 64, GPT2_VOCAB_SIZE)
    leftovers = [p for s in staging for p in s.iterdir()]
    assert all(p.name.startswith((".", "train_", "val_")) for p in leftovers) and not (staging[0] / "meta.json").exists()
    for p in leftovers:                                    # a shard file caught mid-write is never accepted: a temp
        if ".tmp-" in p.name:                              # file gets its real header only once all its data is in
            try: tokens = read_shard(p)
            except ShardError: continue
            assert len(tokens) == 100_000, p               # killed between the header and the rename: complete
        else:
            assert len(read_shard(p)) == 100_000, p        # finished shards are complete
    # the stale hidden folder does not get in the way of the next run
    (tmp_path / "small.txt").write_text("To be, or not to be.")
    prepare([tmp_path / "small.txt"], out, workers=1, progress=False)
    assert PretrainDataset(out, 4, GPT2_VOCAB_SIZE, val_fraction=0).n_tokens == 9      # EOT + 8 tokens


def test_terminated_prepare_cleans_up(big_txt, tmp_path):
    out = tmp_path / "out"
    proc = _start_prepare(big_txt, out)
    try:
        _wait_for_shards(proc, tmp_path, n=1)
        proc.send_signal(signal.SIGTERM)                   # the main process only: it stops its workers itself
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None: os.killpg(proc.pid, signal.SIGKILL); proc.communicate()
    assert proc.returncode == 130 and "interrupted: nothing was written" in err, err
    assert not out.exists() and _hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------- built-in corpus

@pytest.fixture(scope="session")
def builtin(tmp_path_factory) -> Path:
    return builtin_corpus(tmp_path_factory.mktemp("cache"))


def test_builtin_corpus(builtin, works):
    meta = json.loads((builtin / "meta.json").read_text())
    assert meta["documents"] == {"train": 40, "val": 2} and meta["inputs"][0]["file"] == BUILTIN_CORPUS_FILE
    assert sorted(p.name for p in builtin.iterdir()) == ["meta.json", "train_000000.bin", "val_000000.bin"]
    assert 1_400_000 < meta["tokens"]["train"] < 1_600_000 and 50_000 < meta["tokens"]["val"] < 100_000
    enc = get_tokenizer()
    val = read_shard(builtin / "val_000000.bin")
    assert enc.decode(val[1:40].tolist()).startswith(works[19]["text"][:30])       # Macbeth
    mtime = (builtin / "meta.json").stat().st_mtime_ns
    assert builtin_corpus(builtin.parent) == builtin and (builtin / "meta.json").stat().st_mtime_ns == mtime   # cached
    ds = PretrainDataset(builtin, 2048, GPT2_VOCAB_SIZE)
    assert len(ds) == (meta["tokens"]["train"] - 1) // 2048


@pytest.fixture
def small_assets(tmp_path, monkeypatch, works) -> Path:
    "Package data whose built-in corpus is 3 works: quick to build."
    a = tmp_path / "assets"; a.mkdir()
    (a / "gpt2.tiktoken").symlink_to(assets_dir() / "gpt2.tiktoken")
    with lzma.open(a / BUILTIN_CORPUS_FILE, "wt", encoding="utf-8") as f:
        for w in works[:3]: f.write(json.dumps(w) + "\n")
    for module in (TK, C): monkeypatch.setattr(module, "assets_dir", lambda: a)   # the tokenizer's and the corpus's name
    return a


def test_builtin_corpus_race_and_cache_env(small_assets, tmp_path, monkeypatch):
    "Two ranks build the corpus at once into a fresh cache (both finish building before either publishes): both succeed, one folder, no litter."
    cache = tmp_path / "cache"
    real_publish, barrier = P._publish, threading.Barrier(2, timeout=60)
    def publish(*a, **k): barrier.wait(); return real_publish(*a, **k)
    monkeypatch.setattr(P, "_publish", publish)
    monkeypatch.setenv("MAMBA3_LITE_CACHE", str(cache))
    results, errors = [None, None], []
    def rank(i):
        try: results[i] = builtin_corpus(cache if i == 0 else None)     # rank 1 finds the cache through the env var
        except BaseException as e: errors.append(e)
    threads = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
    for t in threads: t.start()
    for t in threads: t.join(120)
    assert not errors and results[0] == results[1] and results[0].parent == cache
    assert [p.name for p in cache.iterdir()] == [results[0].name]           # the loser's staging folder is gone
    meta = json.loads((results[0] / "meta.json").read_text())
    assert meta["documents"] == {"train": 3, "val": 0} and results[0].name.startswith("shakespeare-")


# ---------------------------------------------------------------------------------------------- PretrainDataset

@pytest.fixture
def stream_dir(tmp_path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(0)
    stream = rng.integers(0, GPT2_VOCAB_SIZE, 10_007).astype(np.uint16)
    d = tmp_path / "shards"; d.mkdir()
    for k, (a, b) in enumerate([(0, 1), (1, 2000), (2000, 2000), (2000, 7777), (7777, 10_007)]):
        write_shard(d / f"train_{k:06d}.bin", stream[a:b], GPT2_VOCAB_SIZE)
    return d, stream


def test_windows_across_shards(stream_dir):
    d, stream = stream_dir
    for T in (1, 7, 100, 2048):
        ds = PretrainDataset(d, T, GPT2_VOCAB_SIZE, val_fraction=0)
        assert len(ds) == (len(stream) - 1) // T
        x, y = ds.get_batch(range(len(ds)))
        assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (len(ds), T) and x.is_contiguous()
        starts = np.arange(len(ds)) * T
        assert np.array_equal(x.numpy(), stream[starts[:, None] + np.arange(T)])
        assert np.array_equal(y.numpy(), stream[starts[:, None] + np.arange(T) + 1])
        x0, y0 = ds[len(ds) - 1]
        assert torch.equal(x0, x[-1]) and torch.equal(y0, y[-1]) and torch.equal(ds[-1][0], x0)
    with pytest.raises(IndexError): ds[len(ds)]
    with pytest.raises(IndexError): ds.get_batch([0, len(ds)])


def test_validation_splits(stream_dir, tmp_path):
    d, stream = stream_dir
    n_val = int(len(stream) * 0.05)
    tr = PretrainDataset(d, 10, GPT2_VOCAB_SIZE)                      # no val shards: the tail is held out
    va = PretrainDataset(d, 10, GPT2_VOCAB_SIZE, split="val")
    assert tr.held_out_tail and (tr.start, tr.stop, va.start, va.stop) == (0, len(stream) - n_val, len(stream) - n_val, len(stream))
    assert np.array_equal(va.get_batch([0])[0][0].numpy(), stream[len(stream) - n_val:][:10])
    assert tr.stop + 1 <= va.start + 1 and len(tr) * 10 + 1 <= tr.stop                      # no overlap
    one = PretrainDataset(d / "train_000003.bin", 10, GPT2_VOCAB_SIZE, split="val", val_fraction=0.5)
    assert np.array_equal(one[0][0].numpy(), stream[2000 + (5777 - 2888):][:10])
    write_shard(d / "val_000000.bin", stream[:500], GPT2_VOCAB_SIZE)                        # val shards: used as they are
    tr2, va2 = PretrainDataset(d, 10, GPT2_VOCAB_SIZE), PretrainDataset(d, 10, GPT2_VOCAB_SIZE, split="val")
    assert not tr2.held_out_tail and tr2.n_tokens == len(stream) and va2.n_tokens == 500
    only_val = tmp_path / "only_val"; only_val.mkdir(); shutil.copy(d / "val_000000.bin", only_val)
    with pytest.raises(ValueError, match="no train_"):
        PretrainDataset(only_val, 10, GPT2_VOCAB_SIZE)


def test_dataset_bad_inputs(stream_dir, tmp_path, inputs):
    d, _ = stream_dir
    with pytest.raises(FileNotFoundError, match="nowhere"):
        PretrainDataset(tmp_path / "nowhere", 10, GPT2_VOCAB_SIZE)
    with pytest.raises(ValueError, match="fewer than one window"):
        PretrainDataset(d, 10_000, GPT2_VOCAB_SIZE)
    with pytest.raises(ValueError, match="split must be"):
        PretrainDataset(d, 10, GPT2_VOCAB_SIZE, split="test")
    with pytest.raises(ShardError, match="larger than vocab_size=1,000"):
        PretrainDataset(d, 10, 1000)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no train_"):
        PretrainDataset(tmp_path / "empty", 10, GPT2_VOCAB_SIZE)
    (d / "train_000002.bin").write_bytes(b"garbage")
    with pytest.raises(ShardError, match="train_000002.bin"):
        PretrainDataset(d, 10, GPT2_VOCAB_SIZE)
    out = tmp_path / "prepared"
    prepare([inputs], out, val_fraction=0.2, shard_tokens=50_000, workers=1, progress=False)
    next(out.glob("train_*.bin")).unlink()                                # a partial copy of a prepare output
    with pytest.raises(ValueError, match="the folder is incomplete"):
        PretrainDataset(out, 10, GPT2_VOCAB_SIZE)


def test_dataset_pickles_without_its_data(stream_dir):
    d, _ = stream_dir
    ds = PretrainDataset(d, 64, GPT2_VOCAB_SIZE)
    blob = pickle.dumps(ds)
    assert len(blob) < 10_000                                          # memmaps are reopened, not copied
    ds2 = pickle.loads(blob)
    assert torch.equal(ds2.get_batch([0, 5, 9])[0], ds.get_batch([0, 5, 9])[0])


def test_dataloader_compatible(stream_dir):
    d, _ = stream_dir
    ds = PretrainDataset(d, 32, GPT2_VOCAB_SIZE)
    dl = torch.utils.data.DataLoader(ds, batch_sampler=ds.sampler(4, seed=1), num_workers=0)
    mine = list(batches(ds, ds.sampler(4, seed=1)))
    theirs = list(dl)
    assert len(mine) == len(theirs) == len(ds) // 4
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(mine, theirs))


# ---------------------------------------------------------------------------------------------- sampler

def _reference_order(n, seed, epoch):
    "SplitMix64's finaliser on Python ints (independent of numpy's uint64 arithmetic), then a stable sort by key."
    mask = 2**64 - 1
    def mix(z):
        z = (z + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)
    key = mix(mix(seed) ^ epoch)
    return sorted(range(n), key=lambda i: mix(i ^ key))


def test_order_is_a_fixed_permutation():
    o = shuffled_order(1000, 42, 3)
    assert np.array_equal(np.sort(o), np.arange(1000)) and o.dtype == np.int64
    assert np.array_equal(shuffled_order(1000, 42, 3), o)
    assert not np.array_equal(shuffled_order(1000, 42, 4), o) and not np.array_equal(shuffled_order(1000, 43, 3), o)
    for n, seed, epoch in [(10, 0, 0), (37, 2**63 + 5, 7)]:   # against SplitMix64 written in plain Python ints
        assert shuffled_order(n, seed, epoch).tolist() == _reference_order(n, seed, epoch)
    assert shuffled_order(1, 2**64 - 1, 10**6).tolist() == [0] and shuffled_order(0, 0, 0).tolist() == []


def test_order_is_the_same_in_another_process():
    "Also: the loader imports neither torch nor any mamba3_lite module but the shard format and the runtime helpers."
    code = ("import sys, json, mamba3_lite.data.loader as L; print(json.dumps(L.shuffled_order(1000, 42, 3).tolist())); "
            "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('mamba3_lite.'))))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    order, modules = r.stdout.splitlines()
    assert json.loads(order) == shuffled_order(1000, 42, 3).tolist()
    assert json.loads(modules) == ["mamba3_lite.data", "mamba3_lite.data.loader", "mamba3_lite.data.shards", "mamba3_lite.runtime"]


def _run(sampler, steps: int) -> list:
    "Take `steps` batches, epoch after epoch, the way a step-based trainer does."
    out = []
    while len(out) < steps:
        for idx in sampler:
            out.append(idx)
            if len(out) == steps: break
    return out


@pytest.mark.parametrize("stop", [0, 1, 7, 11, 12, 13, 30])
def test_resume_equals_uninterrupted(stop):
    n, B = 100, 8                                                       # 12 steps per epoch, 4 windows dropped
    want = _run(ResumableSampler(n, batch_size=B, seed=5), 40)
    a = ResumableSampler(n, batch_size=B, seed=5)
    got = _run(a, stop) if stop else []
    state = json.loads(json.dumps(a.state_dict()))
    b = ResumableSampler(n, batch_size=B, seed=0)
    b.load_state_dict(state)
    b.set_epoch(state["epoch"])                                         # the usual call at the top of an epoch: keeps the position
    got += _run(b, 40 - stop)
    assert got == want
    c = ResumableSampler(n, batch_size=B, seed=5); c.seek(stop)                    # a trainer that only saved its step
    assert _run(c, 40 - stop) == want[stop:]


def test_resume_through_batches_gives_the_same_tensors(stream_dir):
    d, _ = stream_dir
    ds = PretrainDataset(d, 16, GPT2_VOCAB_SIZE)
    s = ds.sampler(8, seed=3)
    want = [xy[0] for _, xy in zip(range(100), batches(ds, s, cycle=True))]
    a = ds.sampler(8, seed=3)
    got = [x for _, (x, _) in zip(range(37), batches(ds, a, cycle=True))]
    b = ds.sampler(8); b.load_state_dict(a.state_dict())
    got += [x for _, (x, _) in zip(range(63), batches(ds, b, cycle=True))]
    assert len(got) == 100 and all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("W", [1, 2, 3, 4])
def test_ranks_tile_the_one_process_batch(W):
    n, B = 1000, 5
    one = _run(ResumableSampler(n, batch_size=B * W, seed=11), 2 * (n // (B * W)))   # two epochs
    ranks = [_run(ResumableSampler(n, batch_size=B, seed=11, rank=r, world_size=W), len(one)) for r in range(W)]
    for k in range(len(one)):
        assert sum((ranks[r][k] for r in range(W)), []) == one[k]          # rank 0's block first, then rank 1's, ...
    steps = n // (B * W)
    epoch0 = [i for r in range(W) for b in ranks[r][:steps] for i in b]
    assert len(set(epoch0)) == len(epoch0) == steps * B * W              # disjoint across ranks and steps


def test_resume_on_a_different_world_size():
    n = 1000
    want = _run(ResumableSampler(n, batch_size=12, seed=2), 150)
    a = ResumableSampler(n, batch_size=12, seed=2); got = _run(a, 50)
    ranks = [ResumableSampler(n, batch_size=4, rank=r, world_size=3) for r in range(3)]
    for r in ranks: r.load_state_dict(a.state_dict())
    per_rank = [_run(r, 100) for r in ranks]
    got += [sum((per_rank[r][k] for r in range(3)), []) for k in range(100)]
    assert got == want


def test_sampler_state_and_errors():
    s = ResumableSampler(100, batch_size=8, seed=1, shuffle=False)
    assert len(s) == 12 and next(iter(s)) == list(range(8))
    assert s.state_dict() == dict(seed=1, epoch=0, position=1, shuffle=False, dataset_len=100, global_batch_size=8)
    s.set_epoch(0); assert s.position == 1                              # same epoch: position kept
    s.set_epoch(3); assert (s.epoch, s.position) == (3, 0)
    for bad in (dict(dataset_len=99), dict(global_batch_size=16), dict(shuffle=True), dict(position=13)):
        with pytest.raises(ValueError):
            ResumableSampler(100, batch_size=8, shuffle=False).load_state_dict({**s.state_dict(), **bad})
    for kw in (dict(batch_size=0), dict(world_size=0), dict(rank=2, world_size=2), dict(rank=-1), dict(seed=-1),
               dict(batch_size=60, world_size=2)):
        with pytest.raises(ValueError):
            ResumableSampler(100, **{"batch_size": 8, **kw})


# ---------------------------------------------------------------------------------------------- CLI

def test_cli_end_to_end(inputs, tmp_path):
    out = tmp_path / "cli"
    r = _cli("prepare", inputs, "--out", out, "--val-fraction", "0.2", "--shard-tokens", "50000", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{out}: train 9 documents") and "tok/s" in r.stderr       # the tqdm bar shows tokens/s
    prepare([str(inputs)], tmp_path / "api", val_fraction=0.2, shard_tokens=50_000, workers=1, progress=False)
    assert _tree(out) == _tree(tmp_path / "api")                                          # CLI = API, any worker count
    r = _cli("info", out / "train_000000.bin", out / "meta.json")
    assert r.returncode == 2 and json.loads(r.stdout.splitlines()[0])["tokens"] == 50_000       # a damaged shard: the user's
    assert r.stderr.startswith(f"error: {out / 'meta.json'}: ") and "not a mamba3_lite token shard" in r.stderr


@pytest.mark.parametrize("args, fragment", [
    ([], "COMMAND"), (["shuffle"], "invalid choice"), (["prepare", "--out", "o"], "INPUT"), (["prepare", "x.txt"], "--out"),
    (["prepare", "x.txt", "--out", "o", "--val-fraction", "1.5"], "must be in [0, 1)"),
    (["prepare", "x.txt", "--out", "o", "--val-fraction", "half"], "not a number"),
    (["prepare", "x.txt", "--out", "o", "--shard-tokens", "0"], "must be >= 1"),
    (["prepare", "x.txt", "--out", "o", "--shard-tokens", "1e6"], "not an integer"),
    (["prepare", "x.txt", "--out", "o", "--workers", "-1"], "must be >= 0"),
    (["info"], "SHARD")])
def test_cli_bad_arguments(args, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2 and fragment in capsys.readouterr().err


def test_cli_user_errors_exit_2(tmp_path, capsys):
    "Bad inputs are the user's to fix: status 2 (issue 9; a failure of the machine, like a full disk, is 1)."
    assert main(["prepare", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"error: input not found: {tmp_path / 'nope.txt'}\n"
    assert main(["info", str(tmp_path / "nope.bin")]) == 2


@pytest.mark.filterwarnings("ignore::RuntimeWarning")       # runpy: the module is already imported
def test_no_cli_inside_ipython(monkeypatch):
    "A notebook runs the module with __name__ == '__main__': the entry point must not run there."
    monkeypatch.setattr(builtins, "__IPYTHON__", True, raising=False)
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "kernel.json"])
    ns = runpy.run_module("mamba3_lite.data", run_name="__main__")      # would SystemExit(2) if it parsed argv
    assert ns["__name__"] == "__main__" and ns["__spec__"].name == "mamba3_lite.data.__main__" and callable(ns["main"])


# ---------------------------------------------------------------------------------------------- installed package

def test_works_from_an_installed_location(tmp_path):
    "Install the package (setup.py, package data) into a folder and use it from elsewhere: no repository checkout next to it."
    src = tmp_path / "src"
    src.mkdir()
    for f in ("setup.py", "settings.ini", "pyproject.toml", "README.md"): shutil.copy(REPO / f, src)
    shutil.copytree(REPO / "mamba3_lite", src / "mamba3_lite", ignore=shutil.ignore_patterns("__pycache__"))   # data/ + assets/
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
                        "--disable-pip-version-check", "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "No module named" in r.stderr: pytest.skip(f"cannot build here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (site / "mamba3_lite" / "assets").iterdir()) == ["README.md", "gpt2.tiktoken", "shakespeare.jsonl.xz"]
    work = tmp_path / "elsewhere"; work.mkdir()
    (work / "doc.txt").write_text("Hello world")
    code = ("import sys, mamba3_lite.data.tokenizer as T; from mamba3_lite.data.__main__ import main; from pathlib import Path; "
            "site = Path(sys.argv[1]); assert Path(T.__file__).is_relative_to(site) and T.assets_dir().is_relative_to(site), T.__file__; "
            "assert T.get_tokenizer().encode('Hello world') == [15496, 995]; "
            "sys.exit(main(['prepare', 'doc.txt', '--out', 'out', '--no-progress']))")
    r = subprocess.run([sys.executable, "-c", code, str(site)], cwd=work, env=dict(os.environ, PYTHONPATH=str(site)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert read_shard(work / "out" / "train_000000.bin").tolist() == [EOT_ID, 15496, 995]
