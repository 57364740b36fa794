"""Shared-store benchmark: learn / recall / search rates and p95 with user memory in
PostgreSQL (1 daemon, then 2 daemons on the same server) beside the SQLite backend, all in the
same run.

    .venv/bin/python bench/shared.py            # 4,000 ops per measure, 10,000 episodic entries
    .venv/bin/python bench/shared.py --quick    # 800 ops, 2,000 entries

Setup: a throwaway PostgreSQL server (the Debian binaries, a temporary directory, a Unix socket
only; ``tests/pg_server.py``) and daemons started as subprocesses (``python -m memman_daemon``,
``--shared postgresql://...`` for the PostgreSQL runs). The benchmark process runs 8 clients,
each with one request in flight, split evenly over the daemons of a run. Each measure is timed
per round trip over the daemon's socket:

- learn: ``memman_memory_learn(user, key_i, value)`` — each a durable write (SQLite: committed
  in WAL; PostgreSQL: committed on the server, synchronous_commit on, fsync on);
- recall: ``memman_memory_recall`` of the learned keys (SQLite: a dict read in the daemon;
  PostgreSQL: one indexed query);
- search: ``memman_memory_search(user, "episodic", 1-2 words)`` over a corpus appended through
  the daemon beforehand (FTS5 BM25 vs tsvector + ts_rank), users of 500 entries each;
- hybrid search (with embeddings from the loopback test server, 8 dimensions): the vector part
  runs in the SQLite daemon through sqlite-vec and in PostgreSQL without pgvector through the
  measured fallback (the user's vectors fetched and ranked by cosine in Python).

Figures go to docs/performance.md (## Shared store).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memman import names  # noqa: E402
from memman.client import Client  # noqa: E402
from tests.llm_server import LLMServer  # noqa: E402
from tests.pg_server import PgServer, skip_reason  # noqa: E402

CLIENTS = 8
WORDS = ("billing export invoice region deploy rollback latency cache schema migration "
         "report quarterly churn signup campaign pricing ticket outage alert dashboard").split()


@contextlib.contextmanager
def daemons(n: int, shared: str | None, embeddings: str | None) -> Iterator[list[Path]]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="mmb"))  # 0700: the daemon checks
    procs = []
    try:
        for i in range(n):
            d = root / f"d{i}"
            d.mkdir(mode=0o700)
            cfg = d / "config.toml"
            cfg.write_text("[llm]\napi_key_env = \"MEMMAN_BENCH_NO_KEY\"\n"
                           + (f"embeddings_base_url = \"{embeddings}\"\n" if embeddings else ""))
            argv = [sys.executable, "-m", "memman_daemon", "--socket", str(d / "m.sock"),
                    "--data-dir", str(d / "data"), "--config", str(cfg), "--log-level", "WARNING"]
            if shared:
                argv += ["--shared", shared]
            procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                          stderr=open(d / "log", "wb")))  # noqa: SIM115
        socks = [root / f"d{i}" / "m.sock" for i in range(n)]
        deadline = time.monotonic() + 60
        while not all(s.exists() for s in socks):
            if time.monotonic() > deadline:
                raise TimeoutError("daemons did not start")
            time.sleep(0.05)
        yield socks
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)


async def measure(clients: list[Client], calls: list[tuple[str, tuple[Any, ...]]]) -> dict[str, float]:
    """Run ``calls`` over the clients (one in flight each); rate and latency percentiles."""
    lat: list[float] = []
    queue = list(reversed(calls))

    async def worker(c: Client) -> None:
        while queue:
            method, params = queue.pop()
            t0 = time.perf_counter()
            await c.call(method, *params)
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients))
    wall = time.perf_counter() - t0
    lat.sort()
    return {"rate": len(lat) / wall, "p50_ms": statistics.median(lat) * 1000,
            "p95_ms": lat[int(len(lat) * 0.95) - 1] * 1000}


def query(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(1, 2)))


async def run_config(socks: list[Path], ops: int, entries: int, hybrid: bool,
                     tag: str) -> dict[str, dict[str, float]]:
    clients = [await Client.connect(socks[i % len(socks)], name=f"bench{i}")
               for i in range(CLIENTS)]
    rng = random.Random(7)
    try:
        users = [f"{tag}-u{i}" for i in range(max(1, entries // 500))]
        loads = [(names.MEMORY_APPEND, (users[i % len(users)], "episodic", {
            "content": " ".join(rng.choice(WORDS) for _ in range(12)) + f" #{i}"}))
            for i in range(entries)]
        await measure(clients, loads)
        out = {}
        out["learn"] = await measure(clients, [
            (names.MEMORY_LEARN, (f"{tag}-ana", f"key{i}", f"value {i}")) for i in range(ops)])
        out["recall"] = await measure(clients, [
            (names.MEMORY_RECALL, (f"{tag}-ana", f"key{rng.randrange(ops)}")) for _ in range(ops)])
        n_search = max(100, ops // 4)
        out["search"] = await measure(clients, [
            (names.MEMORY_SEARCH, (rng.choice(users), "episodic", query(rng)))
            for _ in range(n_search)])
        if hybrid:
            out["hybrid"] = out["search"]
        return out
    finally:
        for c in clients:
            await c.close()


def run(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    with PgServer() as pg, LLMServer(dim=8) as llm:
        configs = [("sqlite", 1, False), ("pg1", 1, True), ("pg2", 2, True)]
        for name, n, shared in configs:
            dsn = pg.create_db(f"bench_{name}") if shared else None
            with daemons(n, dsn, None) as socks:
                results[name] = asyncio.run(run_config(socks, args.ops, args.entries, False, name))
            print(f"  {name}: done", file=sys.stderr, flush=True)
        for name, n, shared in configs[:2]:
            dsn = pg.create_db(f"bench_{name}_vec") if shared else None
            with daemons(n, dsn, llm.base_url) as socks:
                r = asyncio.run(run_config(socks, args.ops // 4, args.entries // 4, True,
                                           name + "v"))
            results[name]["hybrid"] = r["hybrid"]
            print(f"  {name} hybrid: done", file=sys.stderr, flush=True)
    return results


def fmt(r: dict[str, float]) -> str:
    return f"{r['rate']:,.0f}/s, p50 {r['p50_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms"


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py: each PostgreSQL figure beside SQLite's from the same run."""
    if skip_reason():
        return [{"benchmark": "shared", "what": "skipped", "value": skip_reason(),
                 "baseline": "", "ratio": "", "target": ""}]
    args = argparse.Namespace(ops=800 if quick else 4000, entries=2000 if quick else 10_000)
    res = run(args)
    out = []
    what = {"learn": "memory_learn (durable write)", "recall": "memory_recall",
            "search": f"memory_search episodic, {args.entries:,} entries",
            "hybrid": f"memory_search hybrid (8-dim vectors), {args.entries // 4:,} entries"}
    for op in ("learn", "recall", "search", "hybrid"):
        base = res["sqlite"][op]
        for cfg, label in (("pg1", "PostgreSQL, 1 daemon"), ("pg2", "PostgreSQL, 2 daemons")):
            if op not in res[cfg]:
                continue
            r = res[cfg][op]
            out.append({"benchmark": "shared", "what": f"{what[op]} — {label}, {CLIENTS} clients",
                        "value": fmt(r), "baseline": f"SQLite, 1 daemon: {fmt(base)}",
                        "ratio": f"{r['rate'] / base['rate']:.2f}x rate, "
                                 f"{r['p95_ms'] / base['p95_ms']:.2f}x p95",
                        "target": ""})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    print("| what | PostgreSQL | SQLite (same run) | ratio |")
    print("|---|---|---|---|")
    for r in rows(a.quick):
        print(f"| {r['what']} | {r['value']} | {r['baseline']} | {r['ratio']} |")


if __name__ == "__main__":
    main()
