"""Retention of planted facts: memman's budgeted context vs a plain newest-first window.

Long synthetic sessions (400 messages of filler) carry three planted facts that matter: a user
instruction, an error, and a tool result the answer depends on, each at a random position. At
budgets of 2k, 4k and 8k tokens we count how many planted facts are present in what the agent
receives (verbatim, or inside a gap/compression summary) for memman's ``memman_session_context``
and for a plain window that keeps the newest messages that fit, in the same run, over the
same sessions. No LLM (the deterministic fallback summaries), real daemon over its socket.

    .venv/bin/python bench/retention.py [--sessions 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import running_daemon  # noqa: E402

FILLER_A = ["Let me think about that for a moment and look at the options we have here.",
            "Here is a longer explanation of the general background, which is mostly context "
            "that the user may or may not need, written out at some length for completeness.",
            "I looked at a few more things and nothing stands out in particular so far.",
            "Continuing with the next part of the analysis, the numbers look ordinary."]
FILLER_U = ["ok", "go on", "thanks, continue please", "hmm, and then?"]


def facts(k: int) -> list[tuple[str, dict, dict | None]]:
    """(marker, entry, tool-call entry or None) for the three planted facts of session k."""
    return [
        (f"KESTREL-{k}", {"role": "user", "content": f"Important task instruction: always deploy to "
                                                    f"the cluster named KESTREL-{k}, never to prod."}, None),
        (f"VOL-{k}", {"role": "tool", "type": "tool_result", "tool_call_id": f"e{k}",
                      "content": f"error: disk quota exceeded on volume VOL-{k}"},
         {"role": "assistant", "type": "tool_call", "content": "",
          "tool_calls": [{"id": f"e{k}", "function": {"name": "df", "arguments": "{}"}}]}),
        (f"ACC-{k}", {"role": "tool", "type": "tool_result", "tool_call_id": f"r{k}",
                      "content": f"[Tool: lookup] success: the customer account id is ACC-{k}"},
         {"role": "assistant", "type": "tool_call", "content": "",
          "tool_calls": [{"id": f"r{k}", "function": {"name": "lookup", "arguments": "{}"}}]}),
    ]


def plain_window(entries: list[dict], budget: int) -> list[dict]:
    out, used = [], 3
    for e in reversed(entries):
        if used + e["tokens"] > budget:
            break
        out.append(e)
        used += e["tokens"]
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--length", type=int, default=400)
    args = ap.parse_args()
    budgets = [2000, 4000, 8000]
    hits = {(b, who): 0 for b in budgets for who in ("memman", "plain")}
    total = 0
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        for k in range(args.sessions):
            rng = random.Random(k)
            sid = f"r{k}"
            await c.call("memman_session_open", sid, {})
            planted = facts(k)
            at = {rng.randrange(0, args.length - 20): f for f in planted}
            while len(at) < len(planted):
                at[rng.randrange(0, args.length - 20)] = planted[len(at)]
            entries = []
            for i in range(args.length):
                if i in at:
                    marker, e, call = at[i]
                    for raw in ([call] if call else []) + [e]:
                        r = await c.call("memman_session_add", sid, raw)
                        entries.append({**r, "content": raw["content"]})
                role = "user" if rng.random() < 0.2 else "assistant"
                text = rng.choice(FILLER_U if role == "user" else FILLER_A)
                r = await c.call("memman_session_add", sid, {"role": role, "content": text})
                entries.append({**r, "content": text})
            total += len(planted)
            for b in budgets:
                ctx = await c.call("memman_session_context", sid, {"max_tokens": b})
                text = "\n".join(m["content"] or "" for m in ctx["messages"])
                plain = "\n".join(e["content"] for e in plain_window(entries, b))
                for marker, _, _ in planted:
                    hits[(b, "memman")] += marker in text
                    hits[(b, "plain")] += marker in plain
    print(f"{args.sessions} sessions x {args.length} filler messages, 3 planted facts each "
          f"({total} facts)\n")
    print("| budget (tokens) | memman kept | plain newest-first kept | ratio |")
    print("|---:|---:|---:|---:|")
    for b in budgets:
        m, p = hits[(b, "memman")], hits[(b, "plain")]
        ratio = f"{m / p:.1f}x" if p else "∞ (plain kept none)"
        print(f"| {b:,} | {m}/{total} ({m / total:.0%}) | {p}/{total} ({p / total:.0%}) | {ratio} |")


if __name__ == "__main__":
    asyncio.run(main())
