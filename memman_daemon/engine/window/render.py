"""A selection as chat messages in log order, each with its part (what it is, its tokens, the
entries it carries, why), and the answer of ``memman_session_context`` around them.

Order: the session's leading system prompt(s), then the ``recalled`` part (past sessions'
entries, oldest first, under a heading with the date and source session of each session's
lines of one day), then the kept units in
log order (an old unit opens with its date when the one before it is of another day; a
value replaced later carries a note naming the later statement), the matching lines of an
entry too large to keep whole where that entry stood, and cached tool results before the
newest user message.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from memman.types import ContextPart, RecalledSource
from memman_daemon.engine.window.candidates import (
    Recalled,
    SessionCandidates,
    group_heading,
    recalled_line,
)
from memman_daemon.engine.window.select import Selection
from memman_daemon.model import Entry

RECALLED_HEADER = ("[Recalled from this user's earlier sessions, oldest first; where they "
                   "disagree the newer statement is current]")


class _Extra(TypedDict, total=False):
    """What a part may say besides its figures (``ContextPart``'s fields not always sent)."""

    rank: int | None
    why: str
    date: str
    superseded: bool
    sources: list[RecalledSource]


def part(kind: str, tokens: int, entry_ids: list[int] | None = None, *,
         score: float | None = None, mark: str = "kept", **extra: Unpack[_Extra]) -> ContextPart:
    return {"kind": kind, "tokens": tokens, "entry_ids": entry_ids or [], "summary_id": None,
            "score": None if score is None else round(score, 6), "mark": mark, **extra}


def date_prefix(day: str) -> str:
    return f"[{day}]\n"


def entry_message(e: Entry, *, day: str | None, note: str) -> dict[str, Any]:
    msg = e.chat_message()
    if day or note:
        msg["content"] = (date_prefix(day) if day else "") + (msg.get("content") or "") + note
    return msg


def recalled_order(items: list[Recalled]) -> list[Recalled]:
    """Oldest first, a session's lines of one day together under their heading."""
    first: dict[tuple[str, str], tuple[float, int]] = {}
    for r in items:
        at = (r.entry.created_at, r.entry.id)
        if r.group not in first or at < first[r.group]:
            first[r.group] = at
    return sorted(items, key=lambda r: (first[r.group], r.group, r.entry.created_at,
                                        r.entry.id))


def recalled_text(ordered: list[Recalled]) -> str:
    """The recalled message's content: the header, then each group's heading and lines
    (``ordered``: as ``recalled_order`` puts them)."""
    lines = [RECALLED_HEADER]
    group = None
    for r in ordered:
        if r.group != group:
            group = r.group
            lines.append(group_heading(group))
        lines.append(recalled_line(r))
    return "\n".join(lines)


def recalled_part(items: list[Recalled], tokens: int) -> tuple[dict[str, Any], ContextPart]:
    """The recalled message and its part; ``tokens``: its measure (the builder's)."""
    ordered = recalled_order(items)
    msg = {"role": "system", "content": recalled_text(ordered)}
    return msg, part("recalled", tokens, [r.entry.id for r in ordered], mark="recalled",
                     sources=[{"entry_id": r.entry.id, "session_id": r.session_id,
                               "date": r.date} for r in ordered])


def lines_message(e: Entry, lines: list[str], role: str) -> dict[str, Any]:
    who = e.name or e.role
    return {"role": role, "content": f"[From a longer {who} message ({e.tokens} tokens), the "
                                     "lines that match the question]\n" + "\n".join(lines)}


def kind_of(e: Entry, mandatory: str) -> str:
    if mandatory == "system":
        return "system_prompt"
    if mandatory == "pinned":
        return "pinned"
    if e.tool_calls:
        return "tool_call"
    if e.role == "tool":
        return "tool_result"
    return "context" if e.type == "context" else "message"


def messages(c: SessionCandidates, sel: Selection, *, days: dict[int, str],
             notes: dict[int, str], count: Any, recalled_tokens: int, gap_role: str,
             parts_of: Any,
             cached: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[ContextPart]]:
    """``count(msg) -> tokens`` (exact, cached by the caller); ``recalled_tokens``: the
    recalled message's (measured from its lines by the caller); ``days[unit]`` the date its
    first entry opens with (dated units only)."""
    msgs: list[dict[str, Any]] = []
    parts: list[ContextPart] = []
    recalled_done = not sel.recalled

    def put_recalled() -> None:
        msg, p = recalled_part(sel.recalled, recalled_tokens)
        msgs.append(msg)
        parts.append(p)

    facts_done = sel.facts is None

    def put_facts() -> None:
        assert sel.facts is not None
        text, ids, tokens = sel.facts
        msgs.append({"role": gap_role, "content": text})
        parts.append(part("fact_lines", tokens, ids, mark="summarized",
                          why="the question asks for many things: their fact lines from "
                              "entries not sent whole"))

    for i in sorted(set(sel.units) | set(sel.lines)):
        u = c.units[i]
        if not recalled_done and u.mandatory != "system":
            put_recalled()
            recalled_done = True
        if not facts_done and u.mandatory != "system":
            put_facts()
            facts_done = True
        info = parts_of(i)
        if i in sel.lines:
            lines, tokens = sel.lines[i]
            msgs.append(lines_message(u.first, lines, gap_role))
            parts.append(part("relevant_lines", tokens, [e.id for e in u.items],
                              mark="summarized", rank=info.get("rank"),
                              why="too large to keep whole: its lines that match the question"))
            continue
        for k, e in enumerate(u.items):
            day = days.get(i) if k == 0 else None
            note = notes.get(e.id, "")
            msg = entry_message(e, day=day, note=note)
            tokens = e.tokens if not (day or note) else count(msg)
            msgs.append(msg)
            p = part(kind_of(e, u.mandatory), tokens, [e.id], score=info.get("fused"),
                     mark="pinned" if u.mandatory == "pinned" else "kept",
                     rank=info.get("rank"), why=sel.units[i])
            if day:
                p["date"] = day
            if note:
                p["superseded"] = True
            parts.append(p)
    if not recalled_done:
        put_recalled()
    if not facts_done:
        put_facts()
    if cached:
        at = len(msgs) - 1 if msgs and msgs[-1].get("role") == "user" else len(msgs)
        msgs[at:at] = cached
        parts[at:at] = [part("cached_tool_result", count(m)) for m in cached]
    return msgs, parts
