"""p50 / p95 latency of memman_session_context for sessions of 100, 1k, 10k and 100k entries,
with recall on over the same user's 100 past sessions (5,000 entries), beside a plain
newest-first window over the same session, measured in the same run.

Runs the real daemon in-process with a real SQLite file; the sessions are loaded through the
store (one bulk write) to save time, then ``memman_session_context`` is called over the real
socket (default 8,000-token budget). Every other call follows an add (not timed), so half the
calls rebuild the session's timeline, as in a live session; the other half hit the per-session
cache. Also reports the in-process time of the algorithm alone (again half after an add).

Baseline: the plainest window an agent could build itself, timed in-process on the same
session — walk the entries from the newest, summing their stored token counts until the
budget is reached, and build the chat message list (no scoring, no pinning, no tool-call
pairing, no summaries).

    .venv/bin/python bench/context.py [--sizes 100,1000,10000,100000] [--calls 40]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memman_daemon.model import Entry, Session  # noqa: E402
from memman_daemon.storage.sqlite import sessions as session_rows  # noqa: E402
from memman_daemon.tokens import REPLY_PRIMING  # noqa: E402
from tests.helpers import running_daemon  # noqa: E402

WORDS = ("the plan task error success deploy build tool result user asked about config value "
         "retry cluster file update approval done failed check log metric").split()
SIZES = (100, 1000, 10_000, 100_000)
PAST_SESSIONS = 100  #: past sessions of the same user, recalled from on every request
PAST_ENTRIES = 50


def populate(app, sid: str, n: int, rng: random.Random) -> list:
    s = app.sessions.get(sid)
    ops = []
    added = []
    now = time.time()
    for i in range(n):
        role = rng.choice(("user", "assistant", "assistant"))
        content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
        e = Entry(id=app.sessions.next_id(), session_id=sid, type="message", role=role,
                  content=content, tokens=0, created_at=now + i)
        e.tokens = app.tokens.count_message(e.chat_message(), s.meta.model)
        s.append(e)
        added.append(e)
        ops.append(session_rows.entry_op(e))
    app.recall.appended(s, added)  # the recall index follows the log (bulk load: told here)
    return ops


def window(s: Session, budget: int) -> tuple[list[dict], int]:
    """The baseline: newest entries first while their stored token counts fit the budget."""
    total = REPLY_PRIMING
    picked = []
    for e in reversed(s.entries):
        if not e.active:
            continue
        if total + e.tokens > budget:
            break
        total += e.tokens
        picked.append(e)
    picked.reverse()
    return [e.chat_message() for e in picked], total


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


async def measure(sizes: list[int], calls: int) -> list[dict]:
    rng = random.Random(7)
    out = []
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        # recall on: the user's 100 past sessions (50 entries each) are searched every time
        for k in range(PAST_SESSIONS):
            await c.call("memman_session_open", f"past{k}", {})
            await d.app.store.write(populate(d.app, f"past{k}", PAST_ENTRIES, rng))
        for n in sizes:
            sid = f"bench{n}"
            await c.call("memman_session_open", sid, {})
            ops = populate(d.app, sid, n, rng)
            await d.app.store.write(ops)
            await d.app.recall.drained(600)  # vectors embedded (the background's job)
            s = d.app.sessions.get(sid)
            budget = s.meta.max_tokens or d.app.config.context.max_tokens
            await c.call("memman_session_context", sid, {})  # warm the timeline cache
            window(s, budget)
            wire, warm, after_add, algo, base = [], [], [], [], []
            for k in range(calls):
                cold = bool(k % 2)
                if cold:  # a new entry invalidates the cached timeline, as in a live session
                    await c.call("memman_session_add", sid, {"content": "one more line"})
                t0 = time.perf_counter()
                r = await c.call("memman_session_context", sid, {})
                ms = (time.perf_counter() - t0) * 1000
                wire.append(ms)
                (after_add if cold else warm).append(ms)
                if cold:
                    await c.call("memman_session_add", sid, {"content": "one more line"})
                t0 = time.perf_counter()
                await d.app.engine.assemble(s, {})
                algo.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                msgs, base_tokens = window(s, budget)
                base.append((time.perf_counter() - t0) * 1000)
            out.append({"n": n, "p50": statistics.median(wire), "p95": pct(wire, 0.95),
                        "warm_p50": statistics.median(warm),
                        "cold_p50": statistics.median(after_add) if after_add else 0.0,
                        "cold_p95": pct(after_add, 0.95) if after_add else 0.0,
                        "algo_p50": statistics.median(algo), "base_p50": statistics.median(base),
                        "base_p95": pct(base, 0.95), "band": r["band"],
                        "messages": len(r["messages"]), "tokens": r["tokens"],
                        "base_messages": len(msgs), "base_tokens": base_tokens, "calls": calls})
    return out


def nlogn_factor(a: int, b: int) -> float:
    return (b * math.log(b)) / (a * math.log(a))


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py: context latency per size beside the plain window, plus growth."""
    sizes = list(SIZES[:3] if quick else SIZES)
    res = asyncio.run(measure(sizes, 20 if quick else 40))
    out = []
    for m in res:
        ok = m["cold_p50"] < 20
        out.append({
            "benchmark": "context",
            "what": f"session_context, {m['n']:,} entries, 8k budget, socket ({m['calls']} calls, "
                    f"every other one right after an add)",
            "value": f"after an add p50 {m['cold_p50']:.2f} ms, p95 {m['cold_p95']:.2f} ms; "
                     f"repeat read p50 {m['warm_p50']:.2f} ms; all calls p95 {m['p95']:.2f} ms",
            "baseline": f"newest-first window in-process: p50 {m['base_p50']:.3f} ms, p95 "
                        f"{m['base_p95']:.3f} ms",
            "ratio": f"{m['cold_p50'] / m['base_p50']:.0f}x (after an add, p50)"
                     if m["base_p50"] else "-",
            "target": (f"< 20 ms p50 {'✓' if ok else '✗'} (after an add)"
                       if m["n"] == 10_000 else ""),
        })
    by = {m["n"]: m for m in res}
    a, b = (10_000, 100_000) if 100_000 in by else (1000, 10_000)
    if a in by and b in by:
        grow = by[b]["cold_p50"] / by[a]["cold_p50"]
        warm = by[b]["warm_p50"] / by[a]["warm_p50"]
        bound = nlogn_factor(a, b)
        out.append({
            "benchmark": "context",
            "what": f"growth {a:,} -> {b:,} entries, p50 after an add" + (
                "" if b == 100_000 else " (quick: no 100k run)"),
            "value": f"x{grow:.1f} (repeat read x{warm:.1f})",
            "baseline": f"n log n: x{bound:.1f}; newest-first window: "
                        f"x{by[b]['base_p50'] / by[a]['base_p50']:.1f}",
            "ratio": f"{grow / bound:.2f} of n log n",
            "target": "no worse than n log n" + (" ✓" if grow <= bound else " ✗"),
        })
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    res = await measure([int(x) for x in args.sizes.split(",")], args.calls)
    print("| entries | p50 ms (socket) | p95 ms (socket) | p50 ms repeat read | p50 ms after an add | "
          "p50 ms (in-process) | baseline window p50 ms | band | messages | tokens | "
          "baseline messages | baseline tokens |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for m in res:
        print(f"| {m['n']:,} | {m['p50']:.2f} | {m['p95']:.2f} | {m['warm_p50']:.2f} | "
              f"{m['cold_p50']:.2f} | "
              f"{m['algo_p50']:.2f} | {m['base_p50']:.3f} | {m['band']} | {m['messages']} | "
              f"{m['tokens']} | {m['base_messages']} | {m['base_tokens']} |")


if __name__ == "__main__":
    asyncio.run(main())
