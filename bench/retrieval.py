"""Retrieval quality and cost: FTS5 alone vs hybrid (BM25 + local vectors, RRF), same run.

1. **Quality.** The labelled set in ``bench/retrieval_set.py`` (hand-written: 109 queries, each
   asking for one of 208 stored memories of one user in other words) is appended through the
   real daemon on a real socket; every query runs as ``memman_memory_search(user, "episodic",
   query, {mode})`` with ``mode`` "fts" (the baseline: BM25 + recency, what memman did
   without an embeddings endpoint), "vector" and "hybrid" (the default). Reported: recall@10
   (target in the top 10) and MRR@10, for all queries and for the *paraphrased* ones — those
   sharing no content word with their target, decided by FTS5 itself (the query's words,
   stop words left out, matched against the target with the same porter tokenizer).
2. **Latency at 100,000 entries.** The labelled memories plus filler up to 100,000 entries of
   the same user (sentences built from templates and slot values, embedded with the local
   model in batches and written straight into SQLite with the daemon's own row format, so
   the benchmark measures search, not ingestion); a fresh daemon then answers
   every query over its socket, hybrid and FTS-only interleaved call by call. Reported: p50 /
   p95 latency, and recall@10 of the labelled queries among the 100k.
3. **Cost.** The local model's load time, RSS growth and texts/s (batches of 256 short texts);
   durable ``memman_session_add`` with 50 clients (bench/rpc.py's client, pinned to one core
   as there) with the local embedder on (entries prefetched into the relevance cache in the
   background) beside the same daemon with ``[embeddings] provider = "none"`` and the echo
   server, in alternating rounds (medians reported), and how long after the burst the
   background compression folded the backlog.

    .venv/bin/python bench/retrieval.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import resource
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the daemon does (memman_daemon/__init__)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from retrieval_set import OTHERS, PAIRS  # noqa: E402

from memman import names  # noqa: E402
from memman.client import Client  # noqa: E402
from memman.config import Config  # noqa: E402
from memman_daemon.search.local_embedder import LocalEmbedder  # noqa: E402
from memman_daemon.server import Server  # noqa: E402
from memman_daemon.storage.memories import MemoryRecord  # noqa: E402
from memman_daemon.storage.sqlite.memories import SqliteMemories  # noqa: E402
from memman_daemon.storage.sqlite.store import Store  # noqa: E402

USER = "ana"
STOP = set("""a an and are as at be by can do does did for from has have he her his how i in
is it its me my no not of on or our she so that the their them there they this to up us was we
were what when where which who why will with you your""".split())


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def shares_word(query: str, target: str) -> bool:
    """Does FTS5 (porter, unicode61) see a content word of ``query`` in ``target``?"""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(c, tokenize='porter unicode61')")
    db.execute("INSERT INTO t(c) VALUES (?)", (target,))
    words = [w for w in "".join(ch if ch.isalnum() else " " for ch in query.lower()).split()
             if w not in STOP]
    if not words:
        return False
    expr = " OR ".join(f'"{w}"' for w in words)
    return bool(db.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expr,)).fetchone()[0])


def config(root: Path, **sections: dict) -> Config:
    cfg = Config.load(root / "none.toml", socket=root / "s" / "memman.sock",
                      data_dir=root / "data", overrides=sections)
    cfg.llm.api_key_env = "MEMMAN_BENCH_NO_KEY"
    cfg.docs.watch = False
    return cfg


class Daemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    async def __aenter__(self) -> Server:
        self.server = Server(self.cfg)
        self.task = asyncio.create_task(self.server.serve(install_signal_handlers=False))
        await self.server.started.wait()
        return self.server

    async def __aexit__(self, *exc: object) -> None:
        self.server.request_stop()
        await asyncio.wait_for(self.task, 120)


def score(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {"recall@10": sum(1 for r in ranks if r is not None and r <= 10) / n,
            "mrr@10": sum(1 / r for r in ranks if r is not None and r <= 10) / n}


async def rank_all(c: Client, ids: list[int], mode: str) -> list[int | None]:
    out = []
    for (_, query), target in zip(PAIRS, ids, strict=True):
        res = await c.call(names.MEMORY_SEARCH, USER, "episodic", query,
                           {"mode": mode, "limit": 10})
        got = [h["id"] for h in res["results"]]
        out.append(got.index(target) + 1 if target in got else None)
    return out


async def quality(root: Path) -> dict:
    cfg = config(root)
    async with Daemon(cfg), await Client.connect(cfg.socket, name="bench") as c:
        order = [(m, i) for i, (m, _) in enumerate(PAIRS)] + [(m, None) for m in OTHERS]
        random.Random(3).shuffle(order)
        ids: dict[int, int] = {}
        for text, i in order:
            r = await c.call(names.MEMORY_APPEND, USER, "episodic",
                             {"content": text, "dedupe": False})
            if i is not None:
                ids[i] = r["record"]["id"]
        target_ids = [ids[i] for i in range(len(PAIRS))]
        ranks = {m: await rank_all(c, target_ids, m) for m in ("fts", "vector", "hybrid")}
    para = [i for i, (m, q) in enumerate(PAIRS) if not shares_word(q, m)]
    out: dict = {"memories": len(PAIRS) + len(OTHERS), "queries": len(PAIRS),
                 "paraphrased": len(para)}
    for m, rs in ranks.items():
        out[m] = {"all": score(rs), "paraphrased": score([rs[i] for i in para]),
                  "sharing": score([r for i, r in enumerate(rs) if i not in para])}
    out["misses_hybrid"] = [PAIRS[i][1] for i, r in enumerate(ranks["hybrid"])
                            if r is None or r > 10][:20]
    return out


# --- 100k entries ---------------------------------------------------------------------------

SUBJECTS = ["the billing service", "the nightly export", "the sales dashboard", "the iOS app",
            "the onboarding flow", "the search index", "the data warehouse", "the CRM sync",
            "the payment gateway", "the mobile checkout", "the marketing site", "the API gateway",
            "the support inbox", "the finance report", "the churn model", "the HR portal",
            "the VPN", "the build pipeline", "the staging cluster", "the analytics job"]
VERBS = ["failed", "was deployed", "slowed down", "was reviewed", "was migrated", "was restarted",
         "was updated", "broke", "recovered", "was audited", "was rewritten", "was paused",
         "ran late", "was documented", "was tested", "was scaled up", "was rolled back"]
WHEN = ["on Monday", "last night", "this morning", "after lunch", "during the demo",
        "before the release", "over the weekend", "at midnight", "in the afternoon",
        "after the outage", "during the sprint", "in week {n}", "on day {n}"]
WHO = ["Ana", "Bob", "Maria", "Tom", "Lisa", "Paul", "Sarah", "Kevin", "Carlos", "Rui", "the team",
       "the on-call engineer", "the vendor", "a customer", "the intern"]
EXTRA = ["and nobody noticed", "so the ticket was closed", "and the logs were attached",
         "which caused a short delay", "as planned", "after two retries",
         "and a follow-up was scheduled", "with no data loss", "and the alert fired",
         "according to {who}"]


def filler(rng: random.Random, n: int) -> list[str]:
    out = []
    for k in range(n):
        s = (f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(WHEN)} "
             f"{rng.choice(EXTRA)}").format(n=rng.randint(1, 52), who=rng.choice(WHO))
        out.append(f"{s} (note {k})")
    return out


async def seed_100k(root: Path, n: int) -> None:
    cfg = config(root)
    from memman_daemon.search.embeddings import Embedder  # noqa: F401  (model id below)
    emb = LocalEmbedder(cfg.embeddings.model, cfg.embeddings.dim,
                        cfg.data_dir / "cache" / "wordllama")
    store = Store(cfg.database_path)
    await store.open()
    rng = random.Random(11)
    labelled = [m for m, _ in PAIRS] + OTHERS
    texts = labelled + filler(rng, n - len(labelled))
    now = time.time()
    emb.load()
    for start in range(0, n, 5000):
        part = texts[start:start + 5000]
        # two threads (the machine's cores): numpy releases the GIL in the model's products
        halves = await asyncio.gather(*(asyncio.to_thread(emb.embed, part[i::2])
                                        for i in (0, 1)))
        vecs = [None] * len(part)
        for i, h in enumerate(halves):
            vecs[i::2] = list(h)
        ops = []
        for k, (t, v) in enumerate(zip(part, vecs, strict=True)):
            rid = 1 + start + k  # the labelled memories are ids 1..208
            at = now - rng.random() * 30 * 86_400
            ops += SqliteMemories(store).upsert(
                MemoryRecord(rid, USER, "episodic", "entry", None, t, {}, at, at))
            ops.append(("INSERT INTO memory_vectors(id, dim, embedding, model) VALUES (?,?,?,?)",
                        (rid, int(v.shape[0]), v.tobytes(), emb.model_id)))
        await store.write(ops)
    await store.close()


async def latency(root: Path, n: int) -> dict:
    t0 = time.perf_counter()
    await seed_100k(root, n)
    seeded = time.perf_counter() - t0
    cfg = config(root)
    async with Daemon(cfg) as server, await Client.connect(cfg.socket, name="bench") as c:
        stored = (await server.app.user_memory.rows.user_counts(USER)).episodic
        targets = {m: i + 1 for i, (m, _) in enumerate(PAIRS)}
        qs = [q for _, q in PAIRS]
        for q in qs[:5]:  # warm up: the first search loads the user's vectors
            await c.call(names.MEMORY_SEARCH, USER, "episodic", q, {})
            await c.call(names.MEMORY_SEARCH, USER, "episodic", q, {"mode": "fts"})
        hyb, fts, ranks = [], [], []
        hyb_cpu, fts_cpu = [], []
        for rep in range(2):
            for (m, q) in PAIRS:
                # wall time of the round trip, and the CPU time this process (client, daemon
                # and SQLite threads) spent on it, which does not grow when other programs
                # load the machine (as bench/search.py)
                t, pt = time.perf_counter(), time.process_time()
                res = await c.call(names.MEMORY_SEARCH, USER, "episodic", q, {})
                hyb.append((time.perf_counter() - t) * 1000)
                hyb_cpu.append((time.process_time() - pt) * 1000)
                t, pt = time.perf_counter(), time.process_time()
                await c.call(names.MEMORY_SEARCH, USER, "episodic", q, {"mode": "fts"})
                fts.append((time.perf_counter() - t) * 1000)
                fts_cpu.append((time.process_time() - pt) * 1000)
                if rep == 0:
                    got = [h["id"] for h in res["results"]]
                    ranks.append(got.index(targets[m]) + 1 if targets[m] in got else None)
        vindex = server.app.user_memory.vscopes.stats()
    return {"entries": stored, "seed_s": round(seeded, 1),
            "hybrid": {"p50_ms": round(statistics.median(hyb), 2), "p95_ms": round(pct(hyb, 95), 2),
                       "cpu_p50_ms": round(statistics.median(hyb_cpu), 2),
                       "cpu_p95_ms": round(pct(hyb_cpu, 95), 2), "n": len(hyb)},
            "fts": {"p50_ms": round(statistics.median(fts), 2), "p95_ms": round(pct(fts, 95), 2),
                    "cpu_p50_ms": round(statistics.median(fts_cpu), 2),
                    "cpu_p95_ms": round(pct(fts_cpu, 95), 2), "n": len(fts)},
            "load_average": round(os.getloadavg()[0], 1),
            "recall_at_100k": score(ranks), "vector_index_bytes": vindex["bytes"]}


# --- the embedder's own cost --------------------------------------------------------------------

def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def daemon_rss_mib() -> dict[str, float]:
    """RSS of a daemon subprocess that has appended and searched one memory, with the local
    embedder and with ``provider = "none"``: what the model costs a daemon that lives all day."""
    from memman.sync_client import SyncClient
    from tests.helpers import daemon_process
    out = {}
    for provider in ("none", "local"):
        os.environ["MEMMAN_EMBEDDINGS_PROVIDER"] = provider
        try:
            with daemon_process() as d:
                with SyncClient(str(d.socket)) as c:
                    c.call(names.MEMORY_APPEND, "u", "episodic", {"content": "hello there"})
                    c.call(names.MEMORY_SEARCH, "u", "episodic", "greeting", {})
                with open(f"/proc/{d.proc.pid}/status") as f:
                    kib = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
                out[provider] = round(kib / 1024, 1)
        finally:
            os.environ.pop("MEMMAN_EMBEDDINGS_PROVIDER", None)
    return out


def model_cost(root: Path, model: str, n: int) -> dict:
    """Load time, RSS growth, texts/s (batches of 256, one thread) and one short text."""
    import numpy  # noqa: F401  (already loaded by the daemon: not the model's cost)
    import tokenizers  # noqa: F401

    import memman_daemon.search.local_embedder as le
    le._models.clear()
    before = rss_kib()
    t = time.perf_counter()
    emb = LocalEmbedder(model, 0, root / "cache-cost")
    emb.load()
    load_s = time.perf_counter() - t
    texts = filler(random.Random(5), n)
    emb.embed(texts[:256])
    t = time.perf_counter()
    for i in range(0, len(texts), 256):
        emb.embed(texts[i:i + 256])
    rate = len(texts) / (time.perf_counter() - t)
    k = min(2000, n // 10)
    t = time.perf_counter()
    for q in texts[:k]:
        emb.embed([q])
    one_us = (time.perf_counter() - t) / k * 1e6
    return {"model_id": emb.model_id, "load_s": round(load_s, 2),
            "rss_growth_mib": round((rss_kib() - before) / 1024, 1),
            "texts_per_s": round(rate), "single_text_us": round(one_us, 1)}


def embedder_cost(root: Path) -> dict:
    """The stored-vector model (the default) and the static model the context window's
    relevance uses, each measured the same way; the daemon's RSS with and without them."""
    from memman_daemon.search.local_embedder import STATIC_MODEL, default_model
    return {"search": model_cost(root, default_model(), 2_000),
            "relevance": model_cost(root, STATIC_MODEL, 20_000),
            "daemon_rss_mib": daemon_rss_mib()}


def durable_adds(quick: bool) -> dict:
    """50 clients adding to one session: the daemon with the local embedders loaded (every
    added entry queued for the background prefetch) and with ``provider = "none"``, beside the
    echo server (the same framing, no work) as the machine's speed in that moment. Rounds
    alternate the three, since this VM's speed moves by a third from minute to minute; the
    median of each is reported. After each daemon's burst: how long its background
    compression took to fold the backlog (the adds themselves do not wait for it)."""
    spec = importlib.util.spec_from_file_location("bench_rpc_for_retrieval",
                                                  ROOT / "bench" / "rpc.py")
    assert spec and spec.loader
    rpc = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = rpc
    spec.loader.exec_module(rpc)
    import msgpack

    from memman.sync_client import SyncClient
    from tests.helpers import daemon_process
    total = 3000 if quick else 30000
    rounds = 1 if quick else 3
    runs: dict[str, list[dict]] = {"echo": [], "none": [], "local": []}
    with rpc.one_core(True):
        for _ in range(rounds):
            with rpc.echo_process() as (echo, pid):
                r = asyncio.run(rpc.run_mode(echo, "echo", "durable add", "50 clients", total,
                                             pid))
                runs["echo"].append({"rate": round(r.rate), "cpu_us": round(r.server_cpu_us, 1)})
            for provider in ("none", "local"):
                os.environ["MEMMAN_EMBEDDINGS_PROVIDER"] = provider
                try:
                    with daemon_process() as d:
                        _warm_up(d.socket, msgpack)
                        r = asyncio.run(rpc.run_mode(d.socket, "memman", "durable add",
                                                     "50 clients", total, d.proc.pid))
                        with SyncClient(str(d.socket)) as c:
                            t0 = time.perf_counter()
                            while (c.call(names.SESSION_GET, "bench", {"entries": False})
                                   ["active_entries"] > 100 and time.perf_counter() - t0 < 120):
                                time.sleep(0.05)
                            caught_up = time.perf_counter() - t0
                            # the recall index's search-model vectors: the backlog drains
                            # in the background after the burst
                            pending0 = (c.stats().get("recall") or {}).get("pending_vectors", 0)
                            t1 = time.perf_counter()
                            while ((c.stats().get("recall") or {}).get("pending_vectors", 0)
                                   and time.perf_counter() - t1 < 600):
                                time.sleep(0.25)
                            drained = time.perf_counter() - t1
                            st = c.stats()
                    runs[provider].append({
                        "rate": round(r.rate), "p50_ms": round(r.p50_ms, 2),
                        "p99_ms": round(r.p99_ms, 2), "errors": r.errors,
                        "cpu_us": round(r.server_cpu_us, 1),
                        "prefetched": st["embeddings"].get("prefetched", 0),
                        "background_s": st["background"]["work_s"],
                        "compressed_after_s": round(caught_up, 2),
                        "longest_slice_ms": st["background"]["longest_slice_ms"],
                        "entries_compressed": st["session_engine"]["entries_compressed"],
                        "recall_pending_after_burst": pending0,
                        "recall_drained_s": round(drained, 1),
                        "recall_drain_per_s": (st.get("recall") or {}).get("drain_per_s", 0)})
                finally:
                    os.environ.pop("MEMMAN_EMBEDDINGS_PROVIDER", None)
    out: dict = {"rounds": runs}
    for k, rs in runs.items():
        out[k] = sorted(rs, key=lambda x: x["rate"])[len(rs) // 2]  # the median round
    return out


def _warm_up(sock: Path, msgpack: Any) -> None:
    """Open the session; a first search and a first context with a question load the two
    models, as any real use would: from then on every added entry is queued for the
    background prefetch (the relevance model)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        for i, (method, params) in enumerate([
                ("memman_session_open", ["bench", {}]),
                (names.MEMORY_SEARCH, ["u", "episodic", "warm up", {}]),
                (names.SESSION_ADD, ["bench", {"role": "user", "content": "warm up the models"}]),
                (names.SESSION_CONTEXT, ["bench", {"query": "warm up"}])]):
            s.sendall(msgpack.packb([0, i + 1, method, params]))
            s.recv(1 << 20)


def run(quick: bool) -> dict:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="mmr"))
    try:
        res: dict = {"quality": asyncio.run(quality(root / "q"))}
        res["latency"] = asyncio.run(latency(root / "l", 10_000 if quick else 100_000))
        res["embedder"] = embedder_cost(root)
        res["durable_add"] = durable_adds(quick)
        return res
    finally:
        shutil.rmtree(root, ignore_errors=True)


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py: each figure beside its baseline from the same run."""
    r = run(quick)
    q, lat, emb, add = r["quality"], r["latency"], r["embedder"], r["durable_add"]
    note = " (quick)" if quick else ""
    out = []
    for part, label in (("paraphrased", f"{q['paraphrased']} paraphrased queries (no shared "
                                        "content word)"),
                        ("all", f"all {q['queries']} queries")):
        h, f = q["hybrid"][part], q["fts"][part]
        target = ""
        if part == "paraphrased":
            ok = h["recall@10"] >= 0.8 and f["recall@10"] < 0.5
            target = "hybrid >= 0.8 where FTS < 0.5" + (" ✓" if ok else " ✗")
        out.append({"benchmark": "retrieval",
                    "what": f"recall@10 / MRR@10, {label}, {q['memories']} memories",
                    "value": f"hybrid {h['recall@10']:.2f} / {h['mrr@10']:.2f}",
                    "baseline": f"FTS5 only {f['recall@10']:.2f} / {f['mrr@10']:.2f}",
                    "ratio": f"{h['recall@10'] / f['recall@10']:.1f}x" if f["recall@10"] else "-",
                    "target": target})
    hy, ft = lat["hybrid"], lat["fts"]
    out.append({"benchmark": "retrieval",
                "what": f"memory_search hybrid, {lat['entries']:,} entries of one user{note}",
                "value": f"p50 {hy['p50_ms']:.1f} ms, p95 {hy['p95_ms']:.1f} ms (socket; CPU p95 "
                         f"{hy['cpu_p95_ms']:.1f} ms; load average {lat['load_average']})",
                "baseline": f"FTS5 only: p50 {ft['p50_ms']:.1f} ms, p95 {ft['p95_ms']:.1f} ms "
                            f"(CPU p95 {ft['cpu_p95_ms']:.1f} ms)",
                "ratio": f"{hy['p95_ms'] / ft['p95_ms']:.2f}x p95" if ft["p95_ms"] else "-",
                "target": "p95 < 50 ms at 100k" + ("" if quick else
                                                     (" ✓" if hy["p95_ms"] < 50 else " ✗"))})
    out.append({"benchmark": "retrieval",
                "what": "durable session_add, 50 clients, local embedder on (prefetch), median of "
                        f"{len(add['rounds']['local'])} rounds" + note,
                "value": f"{add['local']['rate']:,} entries/s (p50 {add['local']['p50_ms']} ms, "
                         f"{add['local']['cpu_us']} µs CPU/add; "
                         f"{add['local']['prefetched']:,} embedded in the background; backlog "
                         f"compressed {add['local']['compressed_after_s']} s after the burst; "
                         f"recall vectors: {add['local']['recall_pending_after_burst']:,} "
                         f"pending after it, drained at "
                         f"{add['local']['recall_drain_per_s']:,.0f}/s in "
                         f"{add['local']['recall_drained_s']} s)",
                "baseline": f"provider none: {add['none']['rate']:,} entries/s "
                            f"(p50 {add['none']['p50_ms']} ms, {add['none']['cpu_us']} µs CPU/add);"
                            f" echo server {add['echo']['rate']:,} req/s",
                "ratio": f"{add['local']['rate'] / add['none']['rate']:.0%}",
                "target": ">= 10,000 entries/s" + (" ✓" if add["local"]["rate"] >= 10_000
                                                   else " ✗")})
    se, rel = emb["search"], emb["relevance"]
    out.append({"benchmark": "retrieval",
                "what": f"local embedder {se['model_id']} (stored vectors, queries), "
                        "batches of 256, one thread",
                "value": f"{se['texts_per_s']:,} texts/s; one text {se['single_text_us']:,} µs; "
                         f"daemon RSS {emb['daemon_rss_mib']['local']} MiB; load {se['load_s']} s",
                "baseline": f"daemon RSS with provider none: {emb['daemon_rss_mib']['none']} MiB; "
                            f"static {rel['model_id']} (context relevance): "
                            f"{rel['texts_per_s']:,} texts/s, one text {rel['single_text_us']} µs",
                "ratio": f"+{emb['daemon_rss_mib']['local'] - emb['daemon_rss_mib']['none']:.0f}"
                         " MiB", "target": "state RSS and texts/s"})
    out.append({"benchmark": "retrieval",
                "what": f"recall@10 / MRR@10 of the {q['queries']} queries among "
                        f"{lat['entries']:,} entries (hybrid){note}",
                "value": f"{lat['recall_at_100k']['recall@10']:.2f} / "
                         f"{lat['recall_at_100k']['mrr@10']:.2f}",
                "baseline": f"among {q['memories']}: {q['hybrid']['all']['recall@10']:.2f} / "
                            f"{q['hybrid']['all']['mrr@10']:.2f}",
                "ratio": "-", "target": ""})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k entries, fewer adds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="", help="quality,latency,embedder,durable_add")
    args = ap.parse_args()
    if args.only:
        root = Path(tempfile.mkdtemp(dir="/tmp", prefix="mmr"))
        try:
            res = {}
            for part in args.only.split(","):
                if part == "quality":
                    res[part] = asyncio.run(quality(root / "q"))
                elif part == "latency":
                    res[part] = asyncio.run(latency(root / "l", 10_000 if args.quick else 100_000))
                elif part == "embedder":
                    res[part] = embedder_cost(root)
                elif part == "durable_add":
                    res[part] = durable_adds(args.quick)
            print(json.dumps(res, indent=2))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    if args.json:
        print(json.dumps(run(args.quick), indent=2))
        return
    print("| what | value | baseline (same run) | ratio | target |\n|---|---|---|---|---|")
    for row in rows(args.quick):
        print(f"| {row['what']} | {row['value']} | {row['baseline']} | {row['ratio']} | "
              f"{row['target']} |")


if __name__ == "__main__":
    main()
