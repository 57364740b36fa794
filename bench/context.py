"""p50 / p95 latency of memman_session_context for sessions of 100, 1k, 10k and 100k entries.

Runs the real daemon in-process with a real SQLite file; the sessions are loaded through the
store (one bulk write) to save time, then ``memman_session_context`` is called over the real
socket (default 8,000-token budget). Also reports the in-process time of the algorithm alone.

    .venv/bin/python bench/context.py [--sizes 100,1000,10000,100000] [--calls 50]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memman_daemon.model import Entry  # noqa: E402
from memman_daemon.sessions import Sessions  # noqa: E402
from tests.helpers import running_daemon  # noqa: E402

WORDS = ("the plan task error success deploy build tool result user asked about config value "
         "retry cluster file update approval done failed check log metric").split()


def populate(core, sid: str, n: int, rng: random.Random) -> None:
    s = core.sessions.get(sid)
    ops = []
    now = time.time()
    for i in range(n):
        role = rng.choice(("user", "assistant", "assistant"))
        content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
        e = Entry(id=core.sessions.next_id(), session_id=sid, type="message", role=role,
                  content=content, tokens=0, created_at=now + i)
        e.tokens = core.tokens.count_message(e.chat_message(), s.meta.model)
        s.append(e)
        ops.append(Sessions.entry_op(e))
    return ops


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(7)
    rows = []
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        for n in [int(x) for x in args.sizes.split(",")]:
            sid = f"bench{n}"
            await c.call("memman_session_open", sid, {})
            ops = populate(d.core, sid, n, rng)
            await d.core.store.write(ops)
            await c.call("memman_session_context", sid, {})  # warm the timeline cache
            wire, algo = [], []
            for k in range(args.calls):
                t0 = time.perf_counter()
                r = await c.call("memman_session_context", sid, {})
                wire.append((time.perf_counter() - t0) * 1000)
                # cold: a new entry invalidates the cached timeline, as in a live session
                if k % 2:
                    await c.call("memman_session_add", sid, {"content": "one more line"})
                t0 = time.perf_counter()
                await d.core.engine.builder.context(d.core.sessions.get(sid))
                algo.append((time.perf_counter() - t0) * 1000)
            rows.append((n, statistics.median(wire), pct(wire, 0.95), statistics.median(algo),
                         r["band"], len(r["messages"]), r["tokens"]))
    print("| entries | p50 ms (socket) | p95 ms (socket) | p50 ms (in-process) | band | messages | tokens |")
    print("|---:|---:|---:|---:|---|---:|---:|")
    for n, p50, p95, a50, band, m, t in rows:
        print(f"| {n:,} | {p50:.2f} | {p95:.2f} | {a50:.2f} | {band} | {m} | {t} |")


if __name__ == "__main__":
    asyncio.run(main())
