#!/usr/bin/env python
"""Throughput of the data pipeline (chapter 06). Prints JSON.

    python benchmarks/bench_data.py                      # the 2-core CPU box: workers=2, the built-in corpus x2
    python benchmarks/bench_data.py --workers 16 --repeat 8

Tokenizer: tokens/s turning the built-in corpus (42 works, 5.06M characters, repeated --repeat times) into ids,
  - plain tiktoken, one process: `Encoding.encode_ordinary` per document with the shipped GPT-2 ranks (ids only);
  - tiktoken's own `encode_ordinary_batch` (a thread pool of --workers threads);
  - `tiktoken.get_encoding("gpt2")` where it can run (it downloads its files; offline it is reported unavailable);
  - our `prepare` end to end (read .jsonl, cut, tokenize, write shards) with 1 and with --workers processes.
Loader: tokens/s of shuffled (16, 2048) batches from memory-mapped shards of random ids (--loader-tokens of them,
  in 4 shards, page cache warm) through `batches()` and through a `DataLoader(num_workers=0)`, against the
  185k tokens/s that the trainer needs (GUIDE §5); plus the time `read_shard` takes to validate every id.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # run from a checkout, no install

import numpy as np
import tiktoken

import mamba3_lite.data as D


def timed(fn, repeat=3, cpu=None):
    """Best-of-`repeat` wall time of fn() (the box is shared: the best run is the least disturbed), the median, fn's last result.
    If `cpu` is a dict, it receives the CPU seconds of the best run: this process, and its (joined) child processes."""
    times, out = [], None
    for _ in range(repeat):
        c, ch, t = time.process_time(), os.times(), time.perf_counter()
        out = fn()
        wall, ch2 = time.perf_counter() - t, os.times()
        if cpu is not None and wall <= min(times, default=wall):
            cpu.update(main=time.process_time() - c,
                       workers=(ch2.children_user - ch.children_user) + (ch2.children_system - ch.children_system))
        times.append(wall)
    return min(times), statistics.median(times), out


def load_docs(repeat):
    import lzma
    with lzma.open(D._assets_dir() / D.BUILTIN_CORPUS_FILE, "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    return docs * repeat


def bench_tokenizer(docs, workers, tmp: Path):
    enc = D.get_tokenizer()
    n_chars = sum(map(len, docs))
    res = {"documents": len(docs), "characters": n_chars}

    cpu = {}
    best, med, toks = timed(lambda: sum(len(enc.encode_ordinary(d)) for d in docs), cpu=cpu)
    n_tok = toks + len(docs)                                   # + one EOT per document, as prepare writes
    res["tokens"] = n_tok
    res["plain_tiktoken_1_process"] = dict(tokens_per_s=round(toks / best), median_tokens_per_s=round(toks / med),
                                           tokens_per_cpu_second=round(toks / cpu["main"]))
    best, med, _ = timed(lambda: enc.encode_ordinary_batch(docs, num_threads=workers))
    res[f"tiktoken_encode_ordinary_batch_{workers}_threads"] = dict(tokens_per_s=round(toks / best), median_tokens_per_s=round(toks / med))

    box = {}
    def official():
        try: box["enc"] = tiktoken.get_encoding("gpt2")
        except Exception as e: box["error"] = f"{type(e).__name__}: {str(e)[:160]}"
    t = threading.Thread(target=official, daemon=True); t.start(); t.join(20)
    if "enc" in box:
        off = box["enc"]
        same = all(off.encode_ordinary(d) == enc.encode_ordinary(d) for d in docs[:5])
        best, med, _ = timed(lambda: sum(len(off.encode_ordinary(d)) for d in docs))
        res["tiktoken_get_encoding_gpt2"] = dict(available=True, same_ids_as_ours=same, tokens_per_s=round(toks / best))
    else:
        res["tiktoken_get_encoding_gpt2"] = dict(available=False, reason=box.get("error", "no answer within 20 s (offline?)"))

    src = tmp / "docs.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for d in docs: f.write(json.dumps({"text": d}) + "\n")
    for w in sorted({1, workers}):
        def run():
            meta = D.prepare([src], tmp / "out", val_fraction=0.005, workers=w, overwrite=True, progress=False)
            return meta["tokens"]["train"] + meta["tokens"]["val"]
        cpu = {}
        best, med, got = timed(run, cpu=cpu)
        assert got == n_tok, (got, n_tok)
        r = dict(tokens_per_s=round(n_tok / best), median_tokens_per_s=round(n_tok / med), seconds=round(best, 3),
                 cpu_seconds_main=round(cpu["main"], 3), cpu_seconds_workers=round(cpu["workers"], 3))
        if w > 1:   # wall-clock speedup needs idle cores; CPU time shows whether anything but the cores limits it
            r["cpu_utilisation_of_workers"] = round((cpu["main"] + cpu["workers"]) / (best * w), 2)
            r["main_process_ceiling_tokens_per_s"] = round(n_tok / cpu["main"])
        res[f"prepare_{w}_worker{'s' if w > 1 else ''}"] = r
    base = res["plain_tiktoken_1_process"]["tokens_per_s"]
    res["speedup_prepare_vs_plain_tiktoken"] = round(res[f"prepare_{workers}_worker{'s' if workers > 1 else ''}"]["tokens_per_s"] / base, 2)
    return res


def bench_loader(n_tokens, tmp: Path, B=16, T=2048, seconds=3.0):
    import torch
    rng = np.random.default_rng(0)
    folder = tmp / "shards"; folder.mkdir()
    per = n_tokens // 4
    for k in range(4):
        D.write_shard(folder / f"train_{k:06d}.bin", rng.integers(0, D.GPT2_VOCAB_SIZE, per, dtype=np.uint16), D.GPT2_VOCAB_SIZE)
    t = time.perf_counter()
    ds = D.PretrainDataset(folder, T, D.GPT2_VOCAB_SIZE, val_fraction=0)      # opens, validates every id
    open_s = time.perf_counter() - t
    res = dict(shard_tokens=4 * per, batch=[B, T], page_cache="warm (just written)",
               open_and_validate=dict(seconds=round(open_s, 3), tokens_per_s=round(4 * per / open_s)))

    def measure(make_iter):
        it, lat, n = make_iter(), [], 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            t = time.perf_counter()
            x, y = next(it)
            lat.append(time.perf_counter() - t); n += x.numel()
        total = time.perf_counter() - t0
        lat_ms = sorted(1e3 * l for l in lat)
        return dict(tokens_per_s=round(n / total), batches=len(lat), ms_per_batch_median=round(statistics.median(lat_ms), 3),
                    ms_per_batch_p99=round(lat_ms[int(0.99 * (len(lat_ms) - 1))], 3))

    res["batches_shuffled"] = measure(lambda: D.batches(ds, ds.sampler(B, seed=0), cycle=True))
    dl = torch.utils.data.DataLoader(ds, batch_sampler=ds.sampler(B, seed=0), num_workers=0)
    def dl_iter():
        while True: yield from dl
    res["dataloader_num_workers_0"] = measure(dl_iter)
    res["headroom_vs_185k_tokens_per_s"] = round(res["batches_shuffled"]["tokens_per_s"] / 185_000, 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="copies of the built-in corpus to tokenize")
    ap.add_argument("--loader-tokens", type=int, default=64_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        out = dict(
            benchmark="bench_data", command=" ".join([os.path.basename(sys.executable)] + sys.argv),
            machine=dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
                         cpus=os.cpu_count(), usable_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                         load_average_at_start=[round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None),
            versions=dict(python=platform.python_version(), numpy=np.__version__, tiktoken=tiktoken.__version__),
            tokenizer=bench_tokenizer(load_docs(args.repeat), args.workers, tmp),
            loader=bench_loader(args.loader_tokens, tmp))
        if hasattr(os, "getloadavg"): out["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
