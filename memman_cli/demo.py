"""Demo agents: scripted conversations that give every panel of the TUI something to show.

``memman demo`` starts N agents; each is an ordinary client holding a conversation with tool
calls (some failing), cache lookups (hits and misses), scratchpad writes, long answers that get
summarized, finalized cycles and context requests. No API key and no LLM are needed: the agents'
words come from the scripts below. Methods the daemon does not offer are skipped (checked once
against ``memman_get_api_info``), so the demo runs against any stage of the daemon.

    memman demo --sessions 4 --duration 60 --rate 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memman import names
from memman.errors import METHOD_NOT_FOUND, ConnectionLost, MemmanError

USERS = (("alice", "acme"), ("bob", "acme"), ("carol", "globex"), ("dave", "initech"))

#: (question, tool, parameters, cache duration in exchanges, wall-clock TTL seconds)
TOPICS: tuple[tuple[str, str, dict[str, Any], int, float | None], ...] = (
    ("Why did sign-ups spike on Nov 3rd?", "db_query",
     {"sql": "SELECT day, count(*) FROM signups GROUP BY day"}, 3, 90.0),
    ("Show me the details of the droideka champion.", "gcs_get_champion_details",
     {"champion_name": "droideka"}, 3, None),
    ("What does the help screen say about exports?", "db_get_ux_details",
     {"query": "screen help"}, 2, 45.0),
    ("Plan the task: migrate the billing table to the new schema.", "repo_search",
     {"pattern": "billing", "path": "src/"}, 4, 120.0),
    ("Which customers churned last quarter?", "db_query",
     {"sql": "SELECT id FROM customers WHERE churned_at > now() - interval '90 days'"}, 2, 60.0),
    ("Summarize yesterday's incident report.", "docs_fetch",
     {"doc": "incidents/2024-11-02.md"}, 3, None),
    ("Run the nightly analysis on the first 100 rows of events.", "table_peek",
     {"table": "events", "limit": 100}, 5, 30.0),
)

INSIGHTS = (
    "The events table is partitioned by day; queries must filter on day to be fast.",
    "This user prefers terse answers with the SQL shown first.",
    "Sign-up spikes line up with marketing emails sent the previous evening.",
    "The billing migration must keep the legacy invoice ids for the auditors.",
    "Error rates rise whenever the nightly job overlaps with the backup window.",
    "Always show money in EUR with two decimals for this tenant.",
)

ERRORS = ("ERROR: connection to db-replica-2 timed out after 30s",
          "failed: permission denied for table customers",
          "exception: rate limit exceeded, retry in 20 seconds")


def long_answer(question: str, rng: random.Random) -> str:
    """An answer well over 750 bytes, so finalize summarizes it."""
    lines = [f"Here is what I found about: {question}"]
    for i in range(rng.randint(6, 12)):
        lines.append(f"{i + 1}. Finding {rng.randint(100, 999)}: the data shows a "
                     f"{rng.choice(['steady', 'sharp', 'slow', 'sudden'])} change in "
                     f"{rng.choice(['sign-ups', 'revenue', 'errors', 'latency', 'churn'])} "
                     f"of {rng.randint(2, 60)}% compared with the previous period, which is "
                     f"consistent with the {rng.choice(['campaign', 'release', 'outage'])}.")
    lines.append("Task completed successfully; next step: review the plan with the team.")
    return "\n".join(lines)


@dataclass
class DemoStats:
    calls: Counter[str] = field(default_factory=Counter)
    skipped: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    cycles: int = 0
    reconnects: int = 0  #: times an agent reconnected after the daemon went away

    def summary(self) -> str:
        out = [f"demo: {self.cycles} Q&A cycles, {sum(self.calls.values())} calls"]
        for method, n in sorted(self.calls.items()):
            out.append(f"  {method:<32} {n}")
        if self.skipped:
            out.append("  skipped (daemon does not offer them): " + ", ".join(sorted(self.skipped)))
        for what, n in sorted(self.errors.items()):
            out.append(f"  error {what} x{n}")
        if self.reconnects:
            out.append(f"  reconnected after a daemon restart x{self.reconnects}")
        return "\n".join(out)


class DemoAgent:
    """One scripted agent on its own connection and session."""

    def __init__(self, client: Any, session_id: str, user: str, tenant: str, methods: set[str],
                 stats: DemoStats, random_state: int, connect: Any = None,
                 say: Any = None) -> None:
        self.client = client
        #: opens a new connection (async, no arguments) when the daemon went away; None: give up
        self.connect = connect
        self.say = say or (lambda _text: None)
        self.session_id = session_id
        self.user = user
        self.tenant = tenant
        self.methods = methods
        self.stats = stats
        self.rng = random.Random(random_state)
        self.turn = 0

    async def call(self, method: str, *params: Any) -> Any:
        """Call if the daemon offers it; None when skipped or refused (the demo goes on)."""
        if self.methods and method not in self.methods:
            self.stats.skipped.add(method)
            return None
        try:
            result = await self.client.call(method, *params)
        except ConnectionLost:
            if self.connect is None:
                raise
            await self.reconnect()
            return None
        except MemmanError as exc:
            if exc.code == METHOD_NOT_FOUND:
                self.methods.discard(method)
                self.stats.skipped.add(method)
            else:
                self.stats.errors[f"{method}: {exc.message[:60]}"] += 1
            return None
        self.stats.calls[method] += 1
        return result

    async def reconnect(self, attempts: int = 600, delay: float = 0.2) -> None:
        """The daemon went away (a restart): say so, then connect again, waiting up to
        ``attempts * delay`` seconds. The session lives on in the daemon; the agent goes on."""
        self.say(f"demo agent {self.session_id}: lost the daemon; reconnecting")
        for _ in range(attempts):
            try:
                self.client = await self.connect()
            except (ConnectionLost, OSError):
                await asyncio.sleep(delay)
                continue
            self.stats.reconnects += 1
            self.say(f"demo agent {self.session_id}: reconnected")
            return
        raise ConnectionLost(f"demo agent {self.session_id}: no daemon came back")

    async def start(self, max_tokens: int, first_of_tenant: bool) -> None:
        opened = await self.call(names.SESSION_OPEN, self.session_id,
                                 {"user_id": self.user, "tenant_id": self.tenant,
                                  "max_tokens": max_tokens})
        # something in user memory and business context for the memory screen
        await self.call(names.MEMORY_LEARN, self.user, "answer_style",
                        self.rng.choice(["terse, SQL first", "detailed, with charts"]), {})
        if first_of_tenant:
            await self.call(names.DOCS_ADD, self.tenant, {
                "doc_id": "handbook", "title": f"{self.tenant} analyst handbook",
                "content": "Sign-ups are counted per day in UTC. Revenue is reported in EUR. "
                           "The events table is partitioned by day; always filter on day. "
                           "Incidents are written up in incidents/ within two days."})
        if not (opened or {}).get("created", True):
            return  # a session of an earlier run: its system prompt is in it already
        await self.call(names.SESSION_ADD, self.session_id, {
            "type": "context", "role": "system", "pinned": True,
            "content": f"[SYSTEM: You are a data analyst agent for tenant {self.tenant}. "
                       "Answer with evidence and show the tools you used.]"})

    async def cycle(self) -> None:
        """One Q&A cycle: question, maybe a tool (cached or not, maybe failing), answer."""
        rng = self.rng
        self.turn += 1
        question, tool, params, duration, ttl = rng.choice(TOPICS)
        sid = self.session_id
        await self.call(names.SESSION_ADD, sid, {"role": "user", "content": question})
        if rng.random() < 0.8:
            await self.use_tool(tool, params, duration, ttl)
        if rng.random() < 0.35:
            insight = rng.choice(INSIGHTS)
            opts: dict[str, Any] = {"flow": tool, "salience": round(rng.uniform(0.2, 1.0), 2),
                                    "surprisal": round(rng.uniform(0.0, 1.0), 2)}
            if rng.random() < 0.2:
                opts["explicit"] = True
            await self.call(names.SCRATCHPAD_WRITE, sid, insight, opts)
        answer = long_answer(question, rng) if rng.random() < 0.5 else (
            f"Done: {question.rstrip('?.')} — success, see the tool output above.")
        await self.call(names.SESSION_ADD, sid, {"role": "assistant", "content": answer})
        await self.call(names.SESSION_FINALIZE, sid, question, answer)
        if rng.random() < 0.5:
            await self.call(names.SESSION_CONTEXT, sid)
        if self.turn % 7 == 0 and rng.random() < 0.5:
            await self.call(names.MEMORY_APPEND, self.user, "episodic",
                            {"content": f"Session {sid} answered: {question}",
                             "metadata": {"session": sid}})
        self.stats.cycles += 1

    async def use_tool(self, tool: str, params: dict[str, Any], duration: int,
                       ttl: float | None) -> None:
        sid, rng = self.session_id, self.rng
        hit = await self.call(names.CACHE_LOOKUP, sid, tool, params)
        call_id = f"call_{self.turn}_{rng.randint(1000, 9999)}"
        await self.call(names.SESSION_ADD, sid, {
            "type": "tool_call", "role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "function": {"name": tool,
                                                          "arguments": json.dumps(params)}}]})
        if hit:
            result = hit.get("result") if isinstance(hit, dict) else str(hit)
            content = f"[Tool: {tool}] (cached) {str(result)[:300]}"
        elif rng.random() < 0.15:
            content = f"[Tool: {tool}] {rng.choice(ERRORS)}"
        else:
            rows = [{"k": rng.randint(1, 99), "v": rng.randint(100, 9999)} for _ in range(8)]
            content = f"[Tool: {tool}] success: {json.dumps(rows)}"
            opts: dict[str, Any] = {"duration": duration}
            if ttl:
                opts["ttl_s"] = ttl
            await self.call(names.CACHE_PUT, sid, tool, params, content, opts)
        await self.call(names.SESSION_ADD, sid, {"type": "tool_result", "role": "tool",
                                                 "tool_call_id": call_id, "name": tool,
                                                 "content": content})


async def run_demo(socket: str | None = None, *, sessions: int = 4, duration: float = 30.0,
                   rate: float = 1.0, max_tokens: int = 6000, prefix: str = "demo",
                   random_state: int = 7, quiet: bool = False) -> DemoStats:
    """Run ``sessions`` agents for ``duration`` seconds at ``rate`` cycles/s each."""
    from memman.client import Client

    stats = DemoStats()
    probe = await Client.connect(socket, name="memman-demo")
    try:
        info = await probe.call(names.GET_API_INFO)
    finally:
        await probe.close()
    methods = {m["name"] if isinstance(m, dict) else str(m) for m in info.get("methods", [])}
    clients = [await Client.connect(socket, name=f"memman-demo-{i}") for i in range(sessions)]
    agents = []

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr, flush=True)

    for i, client in enumerate(clients):
        user, tenant = USERS[i % len(USERS)]

        async def connect(i: int = i) -> Any:
            return await Client.connect(socket, name=f"memman-demo-{i}")

        agents.append(DemoAgent(client, f"{prefix}-{i + 1:02d}", user, tenant, set(methods),
                                stats, random_state + i, connect=connect, say=say))
    deadline = time.monotonic() + duration
    rng = random.Random(random_state)

    tenants_seen: set[str] = set()

    async def drive(agent: DemoAgent, budget: int) -> None:
        first = agent.tenant not in tenants_seen
        tenants_seen.add(agent.tenant)
        await agent.start(budget, first)
        while time.monotonic() < deadline:
            await agent.cycle()
            pause = rng.expovariate(rate) if rate > 0 else 0
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))

    try:
        # different budgets, so the gauges cross the 60/80/90/100 % bands at different times
        scale = (1.0, 0.75, 1.5, 0.5)
        budgets = [int(max_tokens * scale[i % len(scale)]) for i in range(len(agents))]
        await asyncio.gather(*(drive(a, b) for a, b in zip(agents, budgets, strict=True)))
    finally:
        for agent in agents:
            await agent.client.close()
    if not quiet:
        print(stats.summary())
    return stats


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memman demo",
                                description="Run scripted demo agents against the daemon.")
    p.add_argument("--socket", help="daemon socket (default: the usual memman socket)")
    p.add_argument("--sessions", type=int, default=4, help="agents / sessions (default 4)")
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds to run (default 60; bounded, max 86400)")
    p.add_argument("--rate", type=float, default=1.0,
                   help="Q&A cycles per second per agent (default 1)")
    p.add_argument("--max-tokens", type=int, default=6000,
                   help="context budget per session (small, so gauges cross bands)")
    p.add_argument("--prefix", default="demo", help="session id prefix")
    p.add_argument("--random-state", "--seed", dest="random_state", type=int, default=7,
                   help="start value of the agents' random choices (the same run twice)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sessions < 1 or args.duration <= 0 or args.rate < 0:
        print("memman demo: --sessions must be ≥ 1, --duration > 0, --rate ≥ 0", file=sys.stderr)
        return 2
    try:
        asyncio.run(run_demo(args.socket, sessions=args.sessions,
                             duration=min(args.duration, 86400.0), rate=args.rate,
                             max_tokens=args.max_tokens, prefix=args.prefix,
                             random_state=args.random_state))
    except MemmanError as exc:
        print(f"memman demo: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
