"""Building blocks of the context-quality fixtures: a session builder and planted facts.

A fixture is what an agent would send to memman, in order: the system prompt, then per Q&A
cycle the user's message, assistant tool calls with their results, the assistant's answer, and
``memman_session_finalize(question, answer)``; the last cycle ends with the final question only.
Everything is deterministic (text written here, variety drawn from a seeded ``random.Random``).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from typing import Any

#: Seed 001's keywords and markers (section 4.4 and section 6), matched as it matches them:
#: lower-cased substrings. A "keyword-free" fact is stated in an entry that carries none.
SEED001_KEYWORDS = ("error", "failed", "exception", "success", "completed", "done", "plan",
                    "task", "duck_call", "approval", "denied", "warning", "[tool:", "[system:",
                    "[user", "[task")


def seed_keywords_in(text: str) -> list[str]:
    low = text.lower()
    return [k for k in SEED001_KEYWORDS if k in low]


@dataclass(frozen=True)
class Fact:
    """A value a later question depends on. ``current`` must reach the model verbatim (in a
    message or a summary); ``stale`` are earlier values it replaced."""

    key: str
    current: str
    what: str  # what the value is, in words
    where: str  # who states the current value: user / assistant / tool / context
    stale: tuple[str, ...] = ()
    cycle: int = 0  # cycle (1-based) whose entries first state the current value; set by build
    keyword_free: bool = False  # set by build: the stating entry has none of seed 001's keywords

    @property
    def superseded(self) -> bool:
        return bool(self.stale)


@dataclass
class Cycle:
    entries: list[dict[str, Any]]  # memman_session_add payloads, in order
    question: str
    answer: str | None  # None for the final cycle: the question awaits its answer


@dataclass
class FixtureSession:
    session_id: str
    title: str
    shape: str
    cycles: list[Cycle]
    facts: list[Fact]
    model: str = "gpt-4o-mini"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def final_question(self) -> str:
        return self.cycles[-1].question

    def entries(self) -> list[dict[str, Any]]:
        return [e for c in self.cycles for e in c.entries]

    def chat_messages(self) -> list[dict[str, Any]]:
        """The whole history as OpenAI chat messages (what an agent holds without memman)."""
        return [chat_message(e) for e in self.entries()]


DEFAULT_ROLE = {"message": "user", "tool_call": "assistant", "tool_result": "tool",
                "context": "system", "summary": "system"}


def chat_message(e: dict[str, Any]) -> dict[str, Any]:
    role = e.get("role") or DEFAULT_ROLE[e.get("type", "message")]
    m: dict[str, Any] = {"role": role, "content": e.get("content", "")}
    if e.get("tool_calls"):
        m["tool_calls"] = [{"id": c["id"], "type": "function", "function": dict(c["function"])}
                           for c in e["tool_calls"]]
    if e.get("tool_call_id"):
        m["tool_call_id"] = e["tool_call_id"]
    if e.get("name"):
        m["name"] = e["name"]
    return m


class Builder:
    """Writes a session cycle by cycle."""

    def __init__(self, session_id: str, seed: int, system: str) -> None:
        self.session_id = session_id
        self.rng = random.Random(seed)
        self.cycles: list[Cycle] = [Cycle([{"type": "message", "role": "system",
                                            "content": system}], "", "")]
        self._pending: list[dict[str, Any]] = []
        self._question = ""

    # --- one cycle -------------------------------------------------------------
    def user(self, text: str) -> Builder:
        assert not self._pending, "a cycle starts with the user's message"
        self._question = text
        self._pending.append({"type": "message", "role": "user", "content": text})
        return self

    def context(self, text: str) -> Builder:
        """A pasted document, logged as a ``context`` entry."""
        self._pending.append({"type": "context", "content": text})
        return self

    def say(self, text: str) -> Builder:
        """An assistant message in the middle of a cycle (not the final answer)."""
        self._pending.append({"type": "message", "role": "assistant", "content": text})
        return self

    def tools(self, *calls: tuple[str, dict[str, Any], str], preface: str = "") -> Builder:
        """One assistant message with one or more tool calls, then each call's result."""
        ids = [self.call_id() for _ in calls]
        self._pending.append({
            "type": "tool_call", "role": "assistant", "content": preface,
            "tool_calls": [{"id": i, "function": {"name": name, "arguments": json.dumps(args)}}
                           for i, (name, args, _) in zip(ids, calls, strict=True)]})
        for i, (name, _, out) in zip(ids, calls, strict=True):
            self._pending.append({"type": "tool_result", "role": "tool", "tool_call_id": i,
                                  "name": name, "content": out})
        return self

    def tool(self, name: str, args: dict[str, Any], out: str, preface: str = "") -> Builder:
        return self.tools((name, args, out), preface=preface)

    def answer(self, text: str) -> None:
        self._pending.append({"type": "message", "role": "assistant", "content": text})
        self.cycles.append(Cycle(self._pending, self._question, text))
        self._pending, self._question = [], ""

    def final(self, question: str) -> None:
        self.user(question)
        self.cycles.append(Cycle(self._pending, question, None))
        self._pending = []

    # --- helpers -----------------------------------------------------------------
    def call_id(self) -> str:
        return "call_" + "".join(self.rng.choice(string.ascii_letters + string.digits)
                                 for _ in range(24))

    def finish(self, title: str, shape: str, facts: list[Fact]) -> FixtureSession:
        assert not self._pending
        s = FixtureSession(self.session_id, title, shape, self.cycles, place(self.cycles, facts))
        return s


def visible_text(e: dict[str, Any]) -> str:
    """What the model sees of an entry: its content and its tool calls' arguments."""
    return "\n".join([e.get("content") or ""] + [c["function"].get("arguments", "")
                                                  for c in e.get("tool_calls") or []])


def place(cycles: list[Cycle], facts: list[Fact]) -> list[Fact]:
    """Find where each fact is stated and check the fixture is sound: the current value first
    appears in the stated role, after every stale value; no value is in the final question."""
    out = []
    final = cycles[-1].question
    for f in facts:
        first: tuple[int, dict[str, Any]] | None = None
        for ci, c in enumerate(cycles):
            for e in c.entries:
                if f.current in visible_text(e):
                    first = first or (ci, e)
        assert first is not None, f"fact {f.key}: {f.current!r} never stated"
        ci, e = first
        role = e.get("role") or DEFAULT_ROLE[e["type"]]
        kind = "context" if e["type"] == "context" else {"tool": "tool"}.get(role, role)
        assert kind == f.where, f"fact {f.key} first stated by {kind}, not {f.where}"
        assert f.current not in final, f"fact {f.key} is given away by the final question"
        for old in f.stale:
            assert f.current not in old and old not in f.current, f.key
            firsts = [i for i, c in enumerate(cycles) for x in c.entries
                      if old in visible_text(x)]
            assert firsts and firsts[0] < ci, f"fact {f.key}: stale {old!r} must come first"
            assert old not in final, f.key
        out.append(Fact(f.key, f.current, f.what, f.where, f.stale, cycle=ci,
                        keyword_free=not seed_keywords_in(visible_text(e))))
    return out


# --- realistic output generators ------------------------------------------------------
def ts(rng: random.Random, day: int = 14, hour: int | None = None) -> str:
    h = rng.randrange(0, 24) if hour is None else hour
    return f"2026-03-{day:02d}T{h:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}." \
           f"{rng.randrange(1000):03d}Z"


def hexid(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def pods(rng: random.Random, app: str, n: int, ns: str = "billing",
         restarts: bool = False) -> str:
    lines = ["NAME                                READY   STATUS    RESTARTS       AGE     IP"
             "             NODE"]
    for _ in range(n):
        name = f"{app}-{hexid(rng, 9)}-{''.join(rng.choice(string.ascii_lowercase) for _ in range(5))}"
        r = rng.choice([0, 0, 0, 1, 3]) if restarts else 0
        age = f"{rng.randrange(2, 60)}h" if rng.random() < 0.7 else f"{rng.randrange(2, 9)}d"
        ip = f"10.{rng.randrange(16, 31)}.{rng.randrange(0, 255)}.{rng.randrange(2, 254)}"
        node = f"kw-node-{rng.randrange(1, 13):02d}"
        lines.append(f"{name:<35} 1/1     Running   {r:<14} {age:<7} {ip:<14} {node}")
    return "\n".join(lines)


LOG_MSGS = {
    "billing-sync": [
        ("INFO", "batch committed", "rows={n} lag_ms={ms}"),
        ("INFO", "checkpoint advanced", "lsn=0/{hex}"),
        ("DEBUG", "fetched page", "cursor={hex} size={n}"),
        ("INFO", "upstream poll", "status=200 took={ms}ms"),
        ("WARN", "slow commit", "took={ms}ms threshold=800ms"),
        ("INFO", "invoice mirrored", "invoice=inv_{hex} amount_cents={n}"),
    ],
    "gateway": [
        ("INFO", "request", "method=GET path=/v1/invoices status=200 dur={ms}ms"),
        ("INFO", "request", "method=POST path=/v1/ledger/entries status=201 dur={ms}ms"),
        ("INFO", "request", "method=GET path=/healthz status=200 dur=1ms"),
        ("WARN", "upstream retry", "attempt=2 upstream=billing-sync dur={ms}ms"),
        ("INFO", "request", "method=GET path=/v1/customers/cus_{hex} status=404 dur={ms}ms"),
    ],
    "ledger-api": [
        ("INFO", "tx begin", "id={hex}"),
        ("INFO", "tx commit", "id={hex} rows={n} dur={ms}ms"),
        ("DEBUG", "cache hit", "key=acct:{hex}"),
        ("INFO", "gc pause", "dur={ms}us heap_mb={n}"),
    ],
}


def log_lines(rng: random.Random, service: str, n: int, day: int = 14,
              extra: list[str] | None = None) -> str:
    hour = rng.randrange(6, 20)
    lines = []
    for _ in range(n):
        lvl, msg, kv = rng.choice(LOG_MSGS[service])
        kv = kv.format(n=rng.randrange(10, 5000), ms=rng.randrange(3, 900), hex=hexid(rng, 10))
        lines.append(f"{ts(rng, day, hour)} {lvl:<5} {service} {msg} {kv}")
    lines += [f"{ts(rng, day, hour)} {x}" for x in extra or []]
    lines.sort()  # timestamps of one hour: text order is time order
    return "\n".join(lines)


def prom_series(rng: random.Random, metric: str, labels: dict[str, str], points: int,
                lo: float, hi: float, start: int = 1773475200, step: int = 60) -> str:
    vals = [[start + i * step, f"{rng.uniform(lo, hi):.3f}"] for i in range(points)]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": metric, **labels}, "values": vals}]}}, indent=1)


def psql_table(rng: random.Random, cols: list[str], rows: list[list[Any]]) -> str:
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(cols)]
    head = " | ".join(str(c).ljust(w) for c, w in zip(cols, widths, strict=True))
    sep = "-+-".join("-" * w for w in widths)
    body = [" | ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([" " + head, "-" + sep + "-", *(" " + b for b in body),
                      f"({len(rows)} row{'s' if len(rows) != 1 else ''})"])
