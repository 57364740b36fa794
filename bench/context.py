"""p50 / p95 latency of memman_session_context for sessions of 100, 1k, 10k and 100k entries,
with recall on over the same user's 100 past sessions (5,000 entries), beside a plain
newest-first window over the same session, measured in the same run.

Runs the real daemon in-process with a real SQLite file; the sessions are loaded through the
store (one bulk write) to save time, then ``memman_session_context`` is called over the real
socket (default 8,000-token budget). Every other call follows an add (not timed) of a new user
question in the corpus's words, so half the calls rebuild the session's timeline and rank a new
question, as in a live session ("p50 after an add"); the other half ask the same again ("repeat
read": the next step of the same exchange, where what was read for the question is kept). Also
reports the in-process time of the algorithm alone (again half after an add), and the repeat
read while another user adds to a session of theirs on another connection ("another user
adding": a daemon serving many users).

Baseline: the plainest window an agent could build itself, timed in-process on the same
session — walk the entries from the newest, summing their stored token counts until the
budget is reached, and build the chat message list (no scoring, no pinning, no tool-call
pairing, no summaries). The process's resident memory (daemon and benchmark client together)
is reported after each size.

``--burst N`` (default 60,000; 0 = skip): the daemon as a subprocess, N adds from 8 clients
into one session as fast as they are answered, then the first ``memman_session_context``,
then the drain of the background work (vectors, compression) for ``--drain`` seconds; a probe
in a process of its own calls ``memman_ping`` back to back on its own connection the whole
time, and its round trips are reported per phase (p50 / p99 / max), beside the same probe
with the daemon idle. Then the daemon is stopped and started again on the same data dir (unless
``--no-restart``): the time until it answers, then its first context (which waits for the
recall index, loaded after the daemon answers), with the probe pinging.

``--rss N`` (default 100,000; 0 = skip): the daemon's own memory, as a subprocess: N adds of
one user, then the background embedding of all of them to the end; its VmRSS sampled every
second, its peak (VmHWM) and its RSS at rest after it, against the target < 1 GB.

    .venv/bin/python bench/context.py [--sizes 1000,10000,100000] [--calls 40] [--burst 60000]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memman.client import Client  # noqa: E402
from memman_daemon.model import Entry, Session  # noqa: E402
from memman_daemon.storage.sqlite import sessions as session_rows  # noqa: E402
from memman_daemon.tokens import REPLY_PRIMING  # noqa: E402
from tests.helpers import daemon_process, running_daemon, short_tmpdir  # noqa: E402

WORDS = ("the plan task error success deploy build tool result user asked about config value "
         "retry cluster file update approval done failed check log metric").split()
SIZES = (1000, 10_000, 100_000)
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


def question(rng: random.Random, k: int) -> str:
    """A user's next question, in the corpus's words (it matches many rows, as a real one
    does; "one more line" matched none: every request then ranked almost nothing)."""
    return f"why did the {' '.join(rng.choice(WORDS) for _ in range(5))} fail ({k})?"


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
            # the per-entry analysis is the background follower's (in a live session it
            # follows the adds): measured once it has caught up, as the vectors are
            for _ in range(6000):
                st = await c.call("memman_stats")
                if not st["session_engine"]["analysis_pending"]:
                    break
                await asyncio.sleep(0.05)
            window(s, budget)
            wire, warm, after_add, algo, base = [], [], [], [], []
            for k in range(calls):
                cold = bool(k % 2)
                if cold:  # a new question: the timeline and every per-question read are new
                    await c.call("memman_session_add", sid, {"content": question(rng, k)})
                t0 = time.perf_counter()
                r = await c.call("memman_session_context", sid, {})
                ms = (time.perf_counter() - t0) * 1000
                wire.append(ms)
                (after_add if cold else warm).append(ms)
                if cold:
                    await c.call("memman_session_add", sid, {"content": question(rng, k)})
                t0 = time.perf_counter()
                await d.app.engine.assemble(s, {})
                algo.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                msgs, base_tokens = window(s, budget)
                base.append((time.perf_counter() - t0) * 1000)
            busy = await other_user_adding(d, c, sid, calls)
            out.append({"n": n, "rss_mb": rss_mb(), "p50": statistics.median(wire),
                        "busy_p50": statistics.median(busy),
                        "p95": pct(wire, 0.95),
                        "warm_p50": statistics.median(warm),
                        "cold_p50": statistics.median(after_add) if after_add else 0.0,
                        "cold_p95": pct(after_add, 0.95) if after_add else 0.0,
                        "algo_p50": statistics.median(algo), "base_p50": statistics.median(base),
                        "base_p95": pct(base, 0.95), "band": r["band"],
                        "messages": len(r["messages"]), "tokens": r["tokens"],
                        "base_messages": len(msgs), "base_tokens": base_tokens, "calls": calls})
    return out


async def other_user_adding(d, c, sid: str, calls: int) -> list[float]:
    """The session's same request asked again (ms per read) while another user adds to a
    session of theirs on their own connection, a line every few milliseconds: a daemon
    serving many users, where a change of one user's leaves the others' answers as they
    were (``memman_daemon/changes.py``)."""
    await c.call("memman_session_context", sid, {})  # (the answer kept)
    stop = asyncio.Event()

    async def other() -> None:
        async with d.client() as o:
            other_sid = f"other-{sid}"
            await o.call("memman_session_open", other_sid, {"user_id": "someone-else"})
            k = 0
            while not stop.is_set():
                await o.call("memman_session_add", other_sid,
                             {"role": ("user", "assistant")[k % 2],
                              "content": f"another user's line {k}: {' '.join(WORDS[k % 7:])}"})
                k += 1
                await asyncio.sleep(0.005)
    task = asyncio.create_task(other())
    await asyncio.sleep(0.05)
    took = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await c.call("memman_session_context", sid, {})
        took.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.01)
    stop.set()
    await task
    return took


def rss_mb(pid: int | str = "self", key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- another client's ping during a burst, the first context and the drain -----------------
def _probe(sock: str, out: mp.Queue, stop: mp.Event, phase: mp.Value) -> None:
    """Pings back to back on its own connection; round trips (ms) per phase number."""
    async def run() -> None:
        c = await Client.connect(sock, name="probe")
        lat: dict[int, list[float]] = {}
        while not stop.is_set():
            k = phase.value
            t0 = time.perf_counter()
            await c.ping()
            lat.setdefault(k, []).append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.002)
        await c.close()
        out.put(lat)
    asyncio.run(run())


WORDS2 = [*WORDS, *"alpha beta gamma delta node cluster region".split()]


async def _adds(sock: Path, sid: str, n: int, clients: int = 8) -> None:
    rng = random.Random(11)

    async def one(k: int) -> None:
        c = await Client.connect(sock, name=f"burst{k}")
        for i in range(n // clients):
            text = " ".join(rng.choice(WORDS2) for _ in range(rng.randint(5, 30)))
            await c.session_add(sid, {"role": ("user", "assistant")[i % 2],
                                      "content": f"{text} ({k}.{i})"})
        await c.close()
    await asyncio.gather(*(one(k) for k in range(clients)))


async def burst(n: int, drain_s: float, restart: bool = True) -> dict:
    """Phases: 0 idle, 1 the burst, 2 the first context, 3 the drain; then (``restart``) the
    daemon stopped and started again on the same data dir: 4 its start (until it answers a
    ping), 5 the first context after it."""
    root = short_tmpdir()
    try:
        res = await _burst(root, n, drain_s)
        if restart:
            res.update(await _restarted(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res


async def _burst(root: Path, n: int, drain_s: float) -> dict:
    with daemon_process(root) as d:
        q: mp.Queue = mp.Queue()
        stop, phase = mp.Event(), mp.Value("i", 0)
        p = mp.Process(target=_probe, args=(str(d.socket), q, stop, phase))
        c = await Client.connect(d.socket, name="bench")
        # a daemon that ran before: its models loaded (the int8 search model is made once
        # per data dir, seconds the first time)
        await c.session_open("warm", {"user_id": "w"})
        await c.session_add("warm", {"role": "user", "content": "warm up the models"})
        await c.session_context("warm", {"query": "warm"})
        await c.session_open("burst", {"user_id": "u"})
        p.start()
        await asyncio.sleep(2.0)
        took: dict[str, float] = {}
        phase.value = 1
        t0 = time.perf_counter()
        await _adds(d.socket, "burst", n)
        took["burst_s"] = time.perf_counter() - t0
        phase.value = 2
        t0 = time.perf_counter()
        await c.session_context("burst", {"query": "why did the cluster deploy fail"})
        took["first_context_s"] = time.perf_counter() - t0
        phase.value = 3
        t0 = time.perf_counter()
        nxt: list[float] = []
        while time.perf_counter() - t0 < drain_s:
            t1 = time.perf_counter()
            await c.session_context("burst", {"query": "cluster region alpha"})
            nxt.append((time.perf_counter() - t1) * 1000)
            await asyncio.sleep(0.5)
        st = await c.stats()
        stop.set()
        lat = q.get()
        p.join()
        await c.close()
        rss = rss_mb(d.proc.pid, "VmHWM")
    res: dict = {"n": n, **took, "context_during_drain_p50_ms": statistics.median(nxt),
                 "pending_after_drain": st["recall"]["pending_vectors"], "peak_rss_mb": rss}
    for k, name in enumerate(("idle", "burst", "first_context", "drain")):
        res[name] = _summary(lat.get(k, [0.0]))
    return res


def _summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50": statistics.median(xs), "p99": pct(xs, 0.99), "max": max(xs)}


async def _restarted(root: Path) -> dict:
    """The daemon started again on the burst's data dir: how long until it answers a ping,
    then the first context (the same question as after the burst: it waits for the recall
    index, loaded after the daemon answers) and that time from the start; the probe pings
    from the start on (its pings sent before the daemon answered wait for it: phase 4, not
    a measure of serving)."""
    q: mp.Queue = mp.Queue()
    stop, phase = mp.Event(), mp.Value("i", 4)
    t0 = time.perf_counter()
    with daemon_process(root) as d:
        p = mp.Process(target=_probe, args=(str(d.socket), q, stop, phase))
        p.start()
        c = await Client.connect(d.socket, name="bench")
        await c.ping()
        start_s = time.perf_counter() - t0
        phase.value = 5
        t1 = time.perf_counter()
        await c.session_context("burst", {"query": "why did the cluster deploy fail"})
        first = time.perf_counter() - t1
        to_context = time.perf_counter() - t0
        phase.value = 6
        await asyncio.sleep(0.5)
        stop.set()
        lat = q.get()
        p.join()
        await c.close()
        rss = rss_mb(d.proc.pid, "VmHWM")
    return {"restart_start_s": start_s, "restart_first_context_s": first,
            "restart_to_context_s": to_context,
            "restart_peak_rss_mb": rss, "after_start": _summary(lat.get(4, [0.0])),
            "restart_context": _summary(lat.get(5, [0.0]))}


# --- the daemon's own memory at N entries of one user -------------------------------------
async def daemon_rss(n: int, timeout_s: float = 3600.0) -> dict:
    """The daemon as a subprocess: ``n`` adds of one user (10 sessions, 8 clients), then the
    background embedding of every entry (sentence and token vectors) to the end; its VmRSS
    sampled every second, its peak (VmHWM) and its RSS at rest after it."""
    root = short_tmpdir()
    try:
        with daemon_process(root) as d:
            c = await Client.connect(d.socket, name="bench")
            for k in range(10):
                await c.session_open(f"r{k}", {"user_id": "u"})
            rng = random.Random(7)
            t0 = time.perf_counter()

            async def adds(k: int) -> None:
                cc = await Client.connect(d.socket, name=f"rss{k}")
                for i in range(n // 8):
                    text = " ".join(rng.choice(WORDS2) for _ in range(rng.randint(5, 30)))
                    await cc.session_add(f"r{(k + i) % 10}", {
                        "role": ("user", "assistant")[i % 2], "content": f"{text} ({k}.{i})"})
                await cc.close()
            await asyncio.gather(*(adds(k) for k in range(8)))
            adds_s = time.perf_counter() - t0
            after_adds = rss_mb(d.proc.pid)
            peak_sampled = 0.0
            while time.perf_counter() - t0 < timeout_s:
                st = (await c.stats())["recall"]
                peak_sampled = max(peak_sampled, rss_mb(d.proc.pid))
                if not st.get("loading") and st["pending_vectors"] == 0:
                    break
                await asyncio.sleep(1.0)
            embed_s = time.perf_counter() - t0 - adds_s
            await asyncio.sleep(2.0)  # the last batch saved, the heap handed back
            res = {"n": n, "adds_s": adds_s, "embed_s": embed_s, "after_adds_mb": after_adds,
                   "max_sampled_mb": max(peak_sampled, rss_mb(d.proc.pid)),
                   "peak_mb": rss_mb(d.proc.pid, "VmHWM"), "rest_mb": rss_mb(d.proc.pid),
                   "pending": st["pending_vectors"], "entries": st["entries"]}
            await c.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res


def rss_row(r: dict) -> dict:
    ok = r["peak_mb"] < 1024
    return {"benchmark": "context",
            "what": f"daemon's own RSS at {r['n']:,} entries of one user (added in "
                    f"{r['adds_s']:.0f} s, embedded in {r['embed_s']:.0f} s)",
            "value": f"peak (VmHWM) {r['peak_mb']:.0f} MB; at rest after the embedding "
                     f"{r['rest_mb']:.0f} MB; after the adds {r['after_adds_mb']:.0f} MB",
            "baseline": "-", "ratio": "-",
            "target": f"< 1 GB {'✓' if ok else '✗'}"}


def burst_rows(res: dict) -> list[dict]:
    idle = res["idle"]
    out = []
    for name, what in (("burst", f"during a burst of {res['n']:,} adds (8 clients, "
                                 f"{res['burst_s']:.1f} s)"),
                       ("first_context", f"during the first context after it "
                                         f"({res['first_context_s']:.2f} s)"),
                       ("drain", "during the drain that follows (contexts every 0.5 s, p50 "
                                 f"{res['context_during_drain_p50_ms']:.0f} ms)")):
        m = res[name]
        out.append({"benchmark": "context", "what": f"another client's ping {what}",
                    "value": f"p50 {m['p50']:.2f} ms, p99 {m['p99']:.1f} ms, max "
                             f"{m['max']:.0f} ms ({m['n']} pings)",
                    "baseline": f"idle daemon: p50 {idle['p50']:.2f} ms, p99 {idle['p99']:.1f} ms",
                    "ratio": f"{m['p99'] / idle['p99']:.0f}x (p99)" if idle["p99"] else "-",
                    "target": f"within 1 s {'✓' if m['max'] < 1000 else '✗'}"})
    out.append({"benchmark": "context", "what": f"first context after {res['n']:,} adds",
                "value": f"{res['first_context_s']:.2f} s; daemon peak RSS "
                         f"{res['peak_rss_mb']:.0f} MB",
                "baseline": "-", "ratio": "-",
                "target": f"< 5 s {'✓' if res['first_context_s'] < 5 else '✗'}"})
    if "restart_first_context_s" in res:
        m = res["restart_context"]
        out.append({"benchmark": "context",
                    "what": f"first context after a restart on the {res['n']:,} entries (the "
                            f"daemon answered {res['restart_start_s']:.1f} s after its start, "
                            f"the context {res['restart_to_context_s']:.1f} s after it)",
                    "value": f"{res['restart_first_context_s']:.2f} s; another client's ping "
                             f"meanwhile p99 {m['p99']:.1f} ms, max {m['max']:.0f} ms",
                    "baseline": "-", "ratio": "-",
                    "target": "< 5 s, ping within 1 s "
                              f"{'✓' if res['restart_to_context_s'] < 5 and m['max'] < 1000 else '✗'}"
                              " (from the start)"})
    return out


def nlogn_factor(a: int, b: int) -> float:
    return (b * math.log(b)) / (a * math.log(a))


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py: context latency per size beside the plain window, plus growth."""
    sizes = list(SIZES[:2] if quick else SIZES)
    res = asyncio.run(measure(sizes, 20 if quick else 40))
    out = []
    targets = {1000: 10, 10_000: 25, 100_000: 50}
    for m in res:
        ok = m["cold_p50"] < targets.get(m["n"], 0)
        out.append({
            "benchmark": "context",
            "what": f"session_context, {m['n']:,} entries, 8k budget, socket ({m['calls']} calls, "
                    f"every other one right after an add)",
            "value": f"after an add p50 {m['cold_p50']:.2f} ms, p95 {m['cold_p95']:.2f} ms; "
                     f"repeat read p50 {m['warm_p50']:.2f} ms (another user adding: "
                     f"{m['busy_p50']:.2f} ms); all calls p95 {m['p95']:.2f} ms",
            "baseline": f"newest-first window in-process: p50 {m['base_p50']:.3f} ms, p95 "
                        f"{m['base_p95']:.3f} ms",
            "ratio": f"{m['cold_p50'] / m['base_p50']:.0f}x (after an add, p50)"
                     if m["base_p50"] else "-",
            "target": (f"< {targets[m['n']]} ms p50 {'✓' if ok else '✗'} (after an add); RSS "
                       f"{m['rss_mb']:.0f} MB" if m["n"] in targets else ""),
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
    out += burst_rows(asyncio.run(burst(10_000 if quick else 60_000, 10.0 if quick else 20.0)))
    if not quick:
        out.append(rss_row(asyncio.run(daemon_rss(100_000))))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--burst", type=int, default=60_000)
    ap.add_argument("--drain", type=float, default=20.0)
    ap.add_argument("--no-restart", action="store_true",
                    help="skip the restart on the burst's data dir")
    ap.add_argument("--rss", type=int, default=100_000,
                    help="the daemon's own RSS at this many entries of one user, all embedded "
                         "(minutes; 0 = skip)")
    args = ap.parse_args()
    res = await measure([int(x) for x in args.sizes.split(",") if x], args.calls) \
        if args.sizes else []
    print("| entries | p50 ms (socket) | p95 ms (socket) | p50 ms repeat read | p50 ms repeat "
          "read, another user adding | p50 ms after an add | "
          "p50 ms (in-process) | newest-first window p50 ms | band | messages | tokens | "
          "newest-first messages | newest-first tokens | RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for m in res:
        print(f"| {m['n']:,} | {m['p50']:.2f} | {m['p95']:.2f} | {m['warm_p50']:.2f} | "
              f"{m['busy_p50']:.2f} | {m['cold_p50']:.2f} | "
              f"{m['algo_p50']:.2f} | {m['base_p50']:.3f} | {m['band']} | {m['messages']} | "
              f"{m['tokens']} | {m['base_messages']} | {m['base_tokens']} | "
              f"{m['rss_mb']:.0f} |")
    if args.burst:
        b = await burst(args.burst, args.drain, restart=not args.no_restart)
        print()
        print("| another client's ping | p50 ms | p99 ms | max ms | pings |")
        print("|---|---:|---:|---:|---:|")
        for name in ("idle", "burst", "first_context", "drain"):
            m = b[name]
            print(f"| {name} | {m['p50']:.2f} | {m['p99']:.1f} | {m['max']:.0f} | {m['n']} |")
        print(f"\n{b['n']:,} adds in {b['burst_s']:.1f} s; first context {b['first_context_s']:.2f} "
              f"s; contexts during the drain p50 {b['context_during_drain_p50_ms']:.0f} ms; "
              f"vectors still pending after it: {b['pending_after_drain']}; daemon peak RSS "
              f"{b['peak_rss_mb']:.0f} MB")
        if "restart_first_context_s" in b:
            print("\n| after a restart, another client's ping | p50 ms | p99 ms | max ms | pings |")
            print("|---|---:|---:|---:|---:|")
            for name in ("after_start", "restart_context"):
                m = b[name]
                print(f"| {name} | {m['p50']:.2f} | {m['p99']:.1f} | {m['max']:.0f} | {m['n']} |")
            print(f"\nrestart: the daemon answered a ping {b['restart_start_s']:.2f} s after its "
                  f"start; first context {b['restart_first_context_s']:.2f} s after that, "
                  f"{b['restart_to_context_s']:.2f} s after the start; daemon peak RSS "
                  f"{b['restart_peak_rss_mb']:.0f} MB")
    if args.rss:
        r = await daemon_rss(args.rss)
        print(f"\ndaemon's own RSS at {r['n']:,} entries of one user: adds {r['adds_s']:.1f} s "
              f"(RSS after them {r['after_adds_mb']:.0f} MB), embedding {r['embed_s']:.0f} s "
              f"({r['pending']} pending at the end); peak (VmHWM) {r['peak_mb']:.0f} MB, "
              f"largest sample {r['max_sampled_mb']:.0f} MB, at rest after it "
              f"{r['rest_mb']:.0f} MB; target < 1 GB {'✓' if r['peak_mb'] < 1024 else '✗'}")


if __name__ == "__main__":
    asyncio.run(main())
