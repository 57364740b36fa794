"""Token counting: memman's counter beside raw tiktoken, in the same run.

Counts a fixed corpus of chat messages three ways: raw ``tiktoken`` (``encode`` of each content
plus the chat overhead arithmetic, the floor), memman's ``TokenCounter.count_messages``
in-process, and ``memman_count_tokens`` over the daemon's socket (batches of 50 messages).
Reports messages/s and tokens/s, and memman / raw as a ratio. The totals must agree.

    .venv/bin/python bench/tokens.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memman_daemon.tokens import TokenCounter  # noqa: E402
from tests.helpers import running_daemon  # noqa: E402

WORDS = ("the plan task error success deploy build tool result user asked about config value "
         "retry cluster file update approval done failed check log metric 東京 データ").split()
MODEL = "gpt-4o-mini"


def corpus(n: int) -> list[dict]:
    rng = random.Random(3)
    return [{"role": rng.choice(("user", "assistant", "system")),
             "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))}
            for _ in range(n)]


def raw_count(enc, messages: list[dict]) -> int:
    total = 3  # primes the reply
    for m in messages:
        total += 3 + len(enc.encode(m["role"])) + len(enc.encode(m["content"]))
    return total


async def measure(n: int) -> list[dict]:
    msgs = corpus(n)
    counter = TokenCounter()
    enc = counter.encoding(MODEL)
    raw_count(enc, msgs[:10])  # warm
    t0 = time.perf_counter()
    raw = raw_count(enc, msgs)
    t_raw = time.perf_counter() - t0
    t0 = time.perf_counter()
    mine = counter.count_messages(msgs, MODEL)
    t_mine = time.perf_counter() - t0
    async with running_daemon() as d, d.client() as c:
        await c.count_tokens(msgs[:5], MODEL)
        t0 = time.perf_counter()
        wire = 0
        for i in range(0, n, 50):
            wire += (await c.count_tokens(msgs[i:i + 50], MODEL))["tokens"] - 3
        t_wire = time.perf_counter() - t0
        wire += 3
        encoding = counter.encoding_name(MODEL)
    rows = []
    for what, t, total in (("in-process", t_mine, mine), ("over the socket (50/request)", t_wire, wire)):
        rows.append({"benchmark": "tokens", "what": f"count_messages {what}",
                     "value": f"{n / t:,.0f} msg/s ({raw / t / 1e6:.2f} M tokens/s)",
                     "baseline": f"raw tiktoken {n / t_raw:,.0f} msg/s",
                     "ratio": f"{t_raw / t:.0%}", "target": "",
                     "agree": total == raw, "encoding": encoding})
    return rows


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py."""
    return asyncio.run(measure(2000 if quick else 20000))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rs = rows(args.quick)
    print(f"encoding: {rs[0]['encoding']}")
    print("| what | memman | raw tiktoken | memman / raw | totals agree |\n|---|---:|---:|---:|---|")
    for r in rs:
        print(f"| {r['what']} | {r['value']} | {r['baseline']} | {r['ratio']} | {r['agree']} |")


if __name__ == "__main__":
    main()
