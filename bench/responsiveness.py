"""Responsiveness benchmark: while one client runs a heavy request, how long does another
client's simple read wait? (issue 22: "while any one client does anything, a simple read from
another client is answered within 100 ms at the 99th percentile").

    .venv/bin/python bench/responsiveness.py            # the issue's sizes (import scaled down)
    .venv/bin/python bench/responsiveness.py --quick    # smaller inputs (a smoke test)

Setup: one daemon as a subprocess (``python -m memman_daemon``, a fresh data dir, default
config but no LLM key; the default local embedder). A probe, in a process of its own so the
heavy client's own CPU work never delays its clock, sends ``memman_session_get(probe, {limit:
1})`` back to back on its own connection (one request in flight) and times each round trip.
For each case the heavy client (another connection) first prepares what the case needs, then
the probe starts, the heavy request runs, and the probe stops when it is answered. The same
probe with no heavy client is the baseline. Beside each p99: the heavy request's own time and
the daemon's RSS after it (VmRSS) and at its peak so far (VmHWM).

Cases (quick sizes in brackets):

- agent.md ingest of 50 MB [5 MB], written into the tenant's file and picked up by the
  watcher; done when ``memman_stats().agent_md.ingests`` moves;
- import of 100,000 entries [20,000] (the issue's 1M is over the default import limit,
  ``[limits] import_max_entries`` = 100,000, and the 8 MiB frame cap: 1M entries is ~70 MB);
- a 5 MB single-word entry add [1 MB], then a context of that session;
- a 5 MB prose entry add [1 MB], then a context;
- one entry of 100,000 ``key: value`` lines [20,000], then a context;
- 10,000 entries "X moved from A to B" [2,000], then one context (supersession);
- 100,000 tiny adds [10,000] (not probed: they are many requests), then the first context
  (probed).

Every step is bounded by a count and a time limit (``STEP_LIMIT_S``); a step that passes the
limit is reported as such. The context cases depend on the context engine, rewritten in
another branch: re-run after merging. Figures go to docs/performance.md (## Responsiveness).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memman import names  # noqa: E402
from memman.client import Client  # noqa: E402

STEP_LIMIT_S = 600.0  #: longest one heavy request (or its preparation) may take
TARGET_MS = 100.0
PROBE = "probe"
WORDS = ("billing export invoice region deploy rollback latency cache schema migration report "
         "quarterly churn signup campaign pricing ticket outage alert dashboard the a of to and "
         "service customer team weekly").split()


# --- the daemon -----------------------------------------------------------------------------
@contextlib.contextmanager
def daemon() -> Iterator[tuple[Path, subprocess.Popen[bytes], Path]]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="mmr"))  # 0700: the daemon checks
    cfg = root / "config.toml"
    cfg.write_text('[llm]\napi_key_env = "MEMMAN_BENCH_NO_KEY"\n')
    sock, data = root / "m.sock", root / "data"
    argv = [sys.executable, "-m", "memman_daemon", "--socket", str(sock), "--data-dir",
            str(data), "--config", str(cfg), "--log-level", "WARNING"]
    with open(root / "log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("daemon did not start: " + (root / "log").read_text()[-2000:])
            time.sleep(0.05)
        yield sock, proc, data
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out.get("VmRSS", 0.0), out.get("VmHWM", 0.0)


# --- the probe (a process of its own) -------------------------------------------------------
def _probe(sock: str, stop: Any, ready: Any, out: Any) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.settimeout(STEP_LIMIT_S)
    u = msgpack.Unpacker(raw=False)
    lat: list[float] = []
    msgid = 0
    ready.set()
    while not stop.is_set() and len(lat) < 1_000_000:
        msgid += 1
        t0 = time.perf_counter()
        s.sendall(msgpack.packb([0, msgid, names.SESSION_GET, [PROBE, {"limit": 1}]]))
        got = False
        while not got:
            data = s.recv(65536)
            if not data:
                out.put(lat)
                return
            u.feed(data)
            for m in u:
                if m[0] == 1 and m[1] == msgid:
                    got = True
        lat.append((time.perf_counter() - t0) * 1000)
    s.close()
    out.put(lat)


class Probe:
    def __init__(self, sock: Path) -> None:
        ctx = mp.get_context("fork")
        self.stop, self.ready, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=_probe, args=(str(sock), self.stop, self.ready, self.out),
                                daemon=True)

    def __enter__(self) -> Probe:
        self.proc.start()
        self.ready.wait(30)
        return self

    def finish(self) -> list[float]:
        self.stop.set()
        lat = self.out.get(timeout=STEP_LIMIT_S)
        self.proc.join(30)
        return lat

    def __exit__(self, *exc: object) -> None:
        if self.proc.is_alive():
            self.proc.kill()


def summary(lat: list[float]) -> dict[str, Any]:
    if not lat:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    q = sorted(lat)
    return {"n": len(q), "p50": statistics.median(q), "p99": q[min(len(q) - 1, int(len(q) * 0.99))],
            "max": q[-1]}


# --- the cases ------------------------------------------------------------------------------
def prose(n_bytes: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_bytes:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)[:n_bytes]


async def adds(c: Client, sid: str, contents: list[str], in_flight: int = 256) -> None:
    """Many adds, pipelined ``in_flight`` at a time."""
    sem = asyncio.Semaphore(in_flight)

    async def one(text: str) -> None:
        async with sem:
            await c.call(names.SESSION_ADD, sid, {"role": "user", "content": text})
    await asyncio.gather(*(one(t) for t in contents))


Case = tuple[str, Callable[[Client], Awaitable[Any]] | None, Callable[[Client], Awaitable[Any]]]


def cases(quick: bool, data: Path) -> list[Case]:
    big_md = (5 if quick else 50) * 1024 * 1024
    n_import = 20_000 if quick else 100_000
    word = (1 if quick else 5) * 1024 * 1024
    kv_lines = 20_000 if quick else 100_000
    moves = 2_000 if quick else 10_000
    tiny = 10_000 if quick else 100_000
    md_path = data / "tenants" / "bench" / "agent.md"

    async def ingest(c: Client) -> None:
        before = (await c.stats())["agent_md"]["ingests"]
        text = "# agent.md\n\n" + "\n".join(f"- {line}" for line in
                                            prose(big_md, seed=7).split(". "))
        tmp = md_path.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(md_path)
        deadline = time.monotonic() + STEP_LIMIT_S
        while (await c.stats())["agent_md"]["ingests"] == before:
            if time.monotonic() > deadline:
                raise TimeoutError("agent.md was not ingested")
            await asyncio.sleep(0.05)

    async def prep_agent_md(c: Client) -> None:
        # the tenant's directory first, so the watcher sees the file itself arrive
        md_path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.sleep(1.0)

    export: dict[str, Any] = {}

    async def prep_import(c: Client) -> None:
        export.update({"format": "memman.session/1", "session_id": "imported", "entries": [
            # short entries: 100,000 of them must fit the 8 MiB frame cap (~76 bytes each)
            {"id": i + 1, "type": "message", "role": "user" if i % 2 else "assistant",
             "content": f"m{i}", "tokens": 5, "created_at": 1_700_000_000 + i}
            for i in range(n_import)]})

    async def do_import(c: Client) -> None:
        await c.call(names.SESSION_IMPORT, export, {})

    def add_then_context(sid: str, content: str) -> tuple[Callable, Callable]:
        async def prep(c: Client) -> None:
            await c.call(names.SESSION_OPEN, sid, {})

        async def run(c: Client) -> None:
            await c.call(names.SESSION_ADD, sid, {"role": "user", "content": content})
            await c.call(names.SESSION_CONTEXT, sid, {})
        return prep, run

    def many_then_context(sid: str, texts: list[str]) -> tuple[Callable, Callable]:
        async def prep(c: Client) -> None:
            await c.call(names.SESSION_OPEN, sid, {})
            await adds(c, sid, texts)

        async def run(c: Client) -> None:
            await c.call(names.SESSION_CONTEXT, sid, {})
        return prep, run

    places = ["Berlin", "Oslo", "Lisbon", "Austin", "Osaka", "Lima", "Perth", "Quito"]
    move_texts = [f"Item{i % 97} moved from {places[i % 8]} to {places[(i * 3 + 1) % 8]} "
                  f"in step {i}" for i in range(moves)]
    tiny_texts = [f"t{i}" for i in range(tiny)]
    kv = "\n".join(f"key_{i}: value {i}" for i in range(kv_lines))
    out: list[Case] = [
        (f"agent.md ingest of {big_md // 2**20} MB", prep_agent_md, ingest),
        (f"import of {n_import:,} entries", prep_import, do_import),
        (f"{word // 2**20} MB single-word entry, then context",
         *add_then_context("word", "x" * word)),
        (f"{word // 2**20} MB prose entry, then context", *add_then_context("prose", prose(word))),
        (f"{kv_lines:,} `key: value` lines in one entry, then context",
         *add_then_context("kv", kv)),
        (f"{moves:,} 'X moved from A to B' entries, then context",
         *many_then_context("moves", move_texts)),
        (f"{tiny:,} tiny adds, then the first context", *many_then_context("tiny", tiny_texts)),
    ]
    return out


async def run_case(sock: Path, pid: int, name: str, prep: Callable | None, heavy: Callable | None
                   ) -> dict[str, Any]:
    c = await Client.connect(sock, name="heavy", timeout=STEP_LIMIT_S)
    try:
        if prep is not None:
            await asyncio.wait_for(prep(c), STEP_LIMIT_S)
        with Probe(sock) as probe:
            t0 = time.perf_counter()
            error = ""
            if heavy is None:
                await asyncio.sleep(2.0)
            else:
                try:
                    await asyncio.wait_for(heavy(c), STEP_LIMIT_S)
                except Exception as exc:  # noqa: BLE001 - reported in the table
                    error = f"{type(exc).__name__}: {str(exc)[:120]}"
            took = time.perf_counter() - t0
            lat = probe.finish()
        rss, hwm = rss_mb(pid)
        return {"case": name, **summary(lat), "took_s": took, "rss": rss, "hwm": hwm,
                "error": error}
    finally:
        await c.close()


async def measure(quick: bool, only: str = "") -> list[dict[str, Any]]:
    results = []
    with daemon() as (sock, proc, data):
        c = await Client.connect(sock, name="setup")
        await c.call(names.SESSION_OPEN, PROBE, {})
        for i in range(20):
            await c.call(names.SESSION_ADD, PROBE, {"role": "user", "content": f"hello {i}"})
        await c.close()
        results.append(await run_case(sock, proc.pid, "no heavy client (baseline)", None, None))
        for name, prep, heavy in cases(quick, data):
            if only and only not in name:
                continue
            print(f"  {name} ...", file=sys.stderr, flush=True)
            results.append(await run_case(sock, proc.pid, name, prep, heavy))
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| while another client runs | session_get p50 | p99 | max | probes | heavy request "
             "| daemon RSS after (peak) |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        took = f"{r['took_s']:.2f} s" + (f" ({r['error']})" if r["error"] else "")
        lines.append(f"| {r['case']} | {r['p50']:.2f} ms | {r['p99']:.1f} ms | {r['max']:.0f} ms "
                     f"| {r['n']:,} | {took} | {r['rss']:.0f} MB ({r['hwm']:.0f} MB) |")
    return "\n".join(lines)


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py: each case's p99 beside the baseline's."""
    results = asyncio.run(measure(quick))
    base = results[0]
    out = []
    for r in results[1:]:
        ok = "✓" if r["p99"] < TARGET_MS and not r["error"] else "✗"
        out.append({"benchmark": "responsiveness", "what": f"session_get p99 while: {r['case']}",
                    "value": f"{r['p99']:.1f} ms (heavy {r['took_s']:.1f} s, RSS {r['rss']:.0f} MB)",
                    "baseline": f"{base['p99']:.1f} ms idle",
                    "ratio": f"{r['p99'] / base['p99']:.1f}x" if base["p99"] else "",
                    "target": f"< {TARGET_MS:.0f} ms {ok}"})
    print(table(results), file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    ap.add_argument("--only", default="", help="run only the cases whose name holds this text")
    args = ap.parse_args()
    print(table(asyncio.run(measure(args.quick, args.only))))


if __name__ == "__main__":
    main()
