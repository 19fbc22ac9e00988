#!/usr/bin/env python
"""Throughput of the data pipeline (chapter 06: notebooks 06a-06g, package mamba3_lite.data). Prints JSON.

    python benchmarks/bench_data.py                      # the 2-core CPU box: workers=2, the built-in corpus x2
    python benchmarks/bench_data.py --workers 16 --repeat 8 --out benchmarks/results/data_cpu.json

Tokenizer: tokens/s turning the built-in corpus (42 works, 5.06M characters, repeated --repeat times) into ids,
  - plain tiktoken, one process: `Encoding.encode_ordinary` per document with the shipped GPT-2 ranks (ids only);
  - tiktoken's own `encode_ordinary_batch` (a thread pool of --workers threads);
  - `tiktoken.get_encoding("gpt2")` where it can run (it downloads its files; offline it is reported unavailable);
  - our `prepare` end to end (read .jsonl, cut, tokenize, write shards) with 1 and with --workers processes,
    with the CPU seconds per call of the main process and of the workers (what limits it on a shared box).
Loader: tokens/s of shuffled (16, 2048) batches from memory-mapped shards of random ids (--loader-tokens of them,
  in 4 shards, page cache warm) through `batches()` and through a `DataLoader(num_workers=0)`, against the
  185k tokens/s of the speed goal on one H200 (the trainer reaches 145.8k today, benchmarks/results/speed_h200.json); plus the time opening a `PretrainDataset` (which validates
  every id) takes.
Timings are common.time_fn's median and min over --iters calls (after warmup); tokens/s use the median.
"""
import argparse
import json
import lzma
import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import tiktoken

from common import emit, time_fn
from mamba3_lite.data.corpus import BUILTIN_CORPUS_FILE
from mamba3_lite.data.loader import PretrainDataset, batches
from mamba3_lite.data.prepare import prepare
from mamba3_lite.data.shards import write_shard
from mamba3_lite.data.tokenizer import GPT2_VOCAB_SIZE, assets_dir, get_tokenizer


def timed(fn, warmup: int, iters: int) -> dict:
    "common.time_fn on the CPU, plus the mean CPU seconds per call of this process and of its (joined) child processes."
    t0 = os.times()
    r = time_fn(fn, "cpu", warmup=warmup, iters=iters)
    t1 = os.times()
    calls = warmup + iters
    r["cpu_s_main"] = round(((t1.user - t0.user) + (t1.system - t0.system)) / calls, 4)
    r["cpu_s_workers"] = round(((t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)) / calls, 4)
    return r


def rate(n: int, r: dict) -> dict:
    "Add tokens/s (from the median and from the min) to a timing."
    return dict(r, tokens_per_s=round(n / r["median_s"]), best_tokens_per_s=round(n / r["min_s"]))


def load_docs(repeat: int) -> list[str]:
    with lzma.open(assets_dir() / BUILTIN_CORPUS_FILE, "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    return docs * repeat


def official_gpt2(docs, enc, toks, iters) -> dict:
    "tiktoken's own `get_encoding('gpt2')`, if it can fetch its files within 20 s."
    box = {}
    def load():
        try: box["enc"] = tiktoken.get_encoding("gpt2")
        except Exception as e: box["error"] = f"{type(e).__name__}: {str(e)[:160]}"
    t = threading.Thread(target=load, daemon=True); t.start(); t.join(20)
    if "enc" not in box:
        return dict(available=False, reason=box.get("error", "no answer within 20 s (offline?)"))
    off = box["enc"]
    same = all(off.encode_ordinary(d) == enc.encode_ordinary(d) for d in docs[:5])
    return dict(available=True, same_ids_as_ours=same,
                **rate(toks, timed(lambda: [off.encode_ordinary(d) for d in docs], warmup=1, iters=iters)))


def bench_tokenizer(docs, workers: int, iters: int, tmp: Path) -> dict:
    enc = get_tokenizer()
    toks = sum(len(enc.encode_ordinary(d)) for d in docs)
    n_tok = toks + len(docs)                                   # + one EOT per document, as prepare writes
    res = dict(documents=len(docs), characters=sum(map(len, docs)), tokens=n_tok)
    plain = rate(toks, timed(lambda: [enc.encode_ordinary(d) for d in docs], warmup=1, iters=iters))
    res["plain_tiktoken_1_process"] = dict(plain, tokens_per_cpu_second=round(toks / plain["cpu_s_main"]))
    res[f"tiktoken_encode_ordinary_batch_{workers}_threads"] = rate(
        toks, timed(lambda: enc.encode_ordinary_batch(docs, num_threads=workers), warmup=1, iters=iters))
    res["tiktoken_get_encoding_gpt2"] = official_gpt2(docs, enc, toks, iters)

    src = tmp / "docs.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for d in docs: f.write(json.dumps({"text": d}) + "\n")
    for w in sorted({1, workers}):
        def run():
            meta = prepare([src], tmp / "out", val_fraction=0.005, workers=w, overwrite=True, progress=False)
            assert meta["tokens"]["train"] + meta["tokens"]["val"] == n_tok
        r = rate(n_tok, timed(run, warmup=1, iters=iters))
        if w > 1:   # wall-clock speedup needs idle cores; CPU time shows whether anything but the cores limits it
            r["cpu_utilisation_of_workers"] = round((r["cpu_s_main"] + r["cpu_s_workers"]) / (r["median_s"] * w), 2)
            r["main_process_ceiling_tokens_per_s"] = round(n_tok / r["cpu_s_main"])
        res[f"prepare_{w}_worker{'s' if w > 1 else ''}"] = r
    key = f"prepare_{workers}_worker{'s' if workers > 1 else ''}"
    res["speedup_prepare_vs_plain_tiktoken"] = round(res[key]["tokens_per_s"] / res["plain_tiktoken_1_process"]["tokens_per_s"], 2)
    return res


def bench_loader(n_tokens: int, batch_iters: int, tmp: Path, B: int = 16, T: int = 2048) -> dict:
    import torch
    rng = np.random.default_rng(0)
    folder = tmp / "shards"; folder.mkdir()
    per = n_tokens // 4
    for k in range(4):
        write_shard(folder / f"train_{k:06d}.bin", rng.integers(0, GPT2_VOCAB_SIZE, per, dtype=np.uint16), GPT2_VOCAB_SIZE)
    open_ = rate(4 * per, time_fn(lambda: PretrainDataset(folder, T, GPT2_VOCAB_SIZE, val_fraction=0), "cpu", warmup=1, iters=3))
    ds = PretrainDataset(folder, T, GPT2_VOCAB_SIZE, val_fraction=0)
    res = dict(shard_tokens=4 * per, batch=[B, T], page_cache="warm (just written)", open_and_validate=open_)
    it = batches(ds, ds.sampler(B, seed=0), cycle=True)
    res["batches_shuffled"] = rate(B * T, time_fn(lambda: next(it), "cpu", warmup=10, iters=batch_iters))
    dl = torch.utils.data.DataLoader(ds, batch_sampler=ds.sampler(B, seed=0), num_workers=0)
    def forever():
        while True: yield from dl
    dl_it = forever()
    res["dataloader_num_workers_0"] = rate(B * T, time_fn(lambda: next(dl_it), "cpu", warmup=10, iters=batch_iters))
    res["headroom_vs_185k_tokens_per_s"] = round(res["batches_shuffled"]["tokens_per_s"] / 185_000, 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="copies of the built-in corpus to tokenize")
    ap.add_argument("--iters", type=int, default=3, help="timed calls of each tokenizer measurement (after 1 warmup)")
    ap.add_argument("--loader-tokens", type=int, default=64_000_000)
    ap.add_argument("--batch-iters", type=int, default=300, help="timed batches of each loader measurement")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()
    load = lambda: [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_start = load()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results = dict(tokenizer=bench_tokenizer(load_docs(args.repeat), args.workers, args.iters, tmp),
                       loader=bench_loader(args.loader_tokens, args.batch_iters, tmp))
    emit(results, out=args.out, benchmark="bench_data", usable_cpus=usable, load_average_at_start=load_start,
         load_average_at_end=load(), versions=dict(numpy=np.__version__, tiktoken=tiktoken.__version__))


if __name__ == "__main__":
    main()
