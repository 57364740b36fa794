"""The context as sent: ``memman_session_context``'s answer read into parts, a breakdown by
kind, and the two measures of "how full" (sent and history), as the daemon computed them.

Plain data, no textual import: the context view, the session panel, the JSON export and the
tests all read the same :class:`SentView`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: every kind a part may have, in the order the breakdown lists them
KINDS: tuple[str, ...] = (
    "system_prompt", "pinned", "context", "learned", "recalled", "rolling_summary",
    "linked_summary", "gap_summary", "fact_lines", "relevant_lines", "omission_marker", "message", "tool_call", "tool_result",
    "cached_tool_result")
#: what takes room besides the messages (breakdown keys that are not part kinds)
EXTRA = ("reply_priming", "tool_definitions", "free")
#: kinds (and extras) that are the budget's reserved segment: not history, still sent
RESERVED = ("cached_tool_result", "tool_definitions")

LABEL = {"system_prompt": "system prompt", "pinned": "pinned", "context": "context",
         "recalled": "recalled from earlier sessions", "relevant_lines": "matching lines",
         "learned": "preferences, rules, playbook", "fact_lines": "fact lines",
         "rolling_summary": "rolling summary", "linked_summary": "linked summary",
         "gap_summary": "gap summary", "omission_marker": "omission marker",
         "message": "message", "tool_call": "tool call", "tool_result": "tool result",
         "cached_tool_result": "cached tool result", "tool_definitions": "tool definitions",
         "reply_priming": "reply priming",
         "free": "free space"}
#: the kind as a table column shows it (narrow)
SHORT_LABEL = {"system_prompt": "system", "pinned": "pinned", "context": "context",
               "recalled": "recalled", "relevant_lines": "lines", "learned": "learned",
               "fact_lines": "facts",
               "rolling_summary": "rolling sum", "linked_summary": "linked sum",
               "gap_summary": "gap sum", "omission_marker": "omitted", "message": "message",
               "tool_call": "tool call", "tool_result": "tool result",
               "cached_tool_result": "cached tool"}
STYLE = {"system_prompt": "magenta", "pinned": "bright_magenta", "context": "orchid",
         "recalled": "bright_cyan", "relevant_lines": "cyan", "learned": "bright_green",
         "fact_lines": "turquoise4",
         "rolling_summary": "cyan", "linked_summary": "dark_cyan", "gap_summary": "turquoise4",
         "omission_marker": "grey50", "message": "green", "tool_call": "yellow",
         "tool_result": "dark_goldenrod", "cached_tool_result": "blue",
         "tool_definitions": "slate_blue1", "reply_priming": "grey50", "free": "grey23"}


@dataclass
class Part:
    """One message of the list the LLM receives, and what it is."""

    index: int  #: position in ``messages`` (0-based)
    kind: str
    tokens: int  #: this message's tokens, chat overhead included
    mark: str  #: kept / summarized / omitted / pinned
    message: dict[str, Any]
    entry_ids: list[int] = field(default_factory=list)
    summary_id: int | None = None
    score: float | None = None
    #: kind ``recalled``: each line's source (entry_id, session_id, date), in line order
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def role(self) -> str:
        return str(self.message.get("role", "?"))

    @property
    def text(self) -> str:
        """The message as a person reads it (tool calls spelled out)."""
        content = self.message.get("content")
        if isinstance(content, list):  # content parts
            content = "\n".join(str(p.get("text", p)) if isinstance(p, dict) else str(p)
                                for p in content)
        text = "" if content is None else str(content)
        calls = self.message.get("tool_calls") or []
        if calls:
            spelled = "\n".join(
                f"→ {(c.get('function') or {}).get('name', '?')}"
                f"({(c.get('function') or {}).get('arguments', '')})"
                for c in calls if isinstance(c, dict))
            text = f"{text}\n{spelled}" if text else spelled
        return text

    @property
    def key(self) -> str:
        """A row key that follows the item across refreshes (its entry, summary or kind)."""
        if self.entry_ids:
            return f"e{self.entry_ids[0]}"
        if self.summary_id is not None:
            return f"s{self.summary_id}"
        if self.message.get("tool_call_id"):
            return f"t{self.message['tool_call_id']}"
        return f"{self.kind}:{self.index}"


@dataclass
class RecalledLine:
    """One line of the ``recalled`` part: an entry of another of the user's sessions."""

    entry_id: int
    session_id: str
    date: str
    text: str  #: the line as the LLM reads it
    tokens: int = 0

    @property
    def key(self) -> str:
        return f"r{self.entry_id}"


def recalled_lines(p: Part) -> list[RecalledLine]:
    """The recalled part's lines with their sources (the header and the headings of each
    session's lines left out: an entry's line starts with "- ")."""
    lines = [ln for ln in p.text.splitlines()[1:] if ln.startswith("- ")]
    return [RecalledLine(int(src.get("entry_id", 0)), str(src.get("session_id", "")),
                         str(src.get("date", "")), line)
            for src, line in zip(p.sources, lines, strict=False)]


@dataclass
class SentView:
    """``memman_session_context``'s answer, read once."""

    session_id: str
    messages: list[dict[str, Any]]
    parts: list[Part]
    budget: int  #: the session's budget (tokens)
    sent_tokens: int  #: what the LLM receives, tool definitions included
    history_tokens: int  #: the whole active log
    sent_usage: float  #: sent_tokens / budget, from the daemon
    history_usage: float  #: history_tokens / budget, from the daemon
    tool_tokens: int  #: the function definitions (opts.tools)
    breakdown: dict[str, int]  #: kind -> tokens, plus tool_definitions and free
    band: str = ""
    why: str = ""
    fallback: bool = False  #: parts derived by the TUI (the daemon did not send them)
    answer: dict[str, Any] = field(default_factory=dict)

    @property
    def reserved_tokens(self) -> int:
        return sum(self.breakdown.get(k, 0) for k in RESERVED)

    def to_json(self) -> str:
        """The whole list as written by the export key: the messages as sent, each with its
        kind, tokens and mark, and the totals."""
        return json.dumps({
            "session_id": self.session_id, "budget": self.budget,
            "sent_tokens": self.sent_tokens, "history_tokens": self.history_tokens,
            "sent_usage": self.sent_usage, "history_usage": self.history_usage,
            "tool_tokens": self.tool_tokens, "breakdown": self.breakdown,
            "messages": self.messages,
            "parts": [{"index": p.index, "kind": p.kind, "tokens": p.tokens, "mark": p.mark,
                       "entry_ids": p.entry_ids, "summary_id": p.summary_id, "score": p.score}
                      for p in self.parts],
        }, ensure_ascii=False, indent=2, default=str)


def read_answer(answer: dict[str, Any]) -> SentView:
    """A SentView from the daemon's answer (its ``parts``, ``breakdown`` and sent / history
    figures; an older daemon's answer goes through :func:`fallback_parts`)."""
    messages = [m for m in answer.get("messages") or [] if isinstance(m, dict)]
    budget = int(answer.get("budget") or 0) or 1
    raw_parts = answer.get("parts")
    fallback = not isinstance(raw_parts, list) or len(raw_parts) != len(messages)
    if fallback:
        raw_parts = fallback_parts(answer)
    parts = [Part(i, str(p.get("kind") or "message"), int(p.get("tokens") or 0),
                  str(p.get("mark") or "kept"), m, [int(x) for x in p.get("entry_ids") or []],
                  p.get("summary_id"), p.get("score"),
                  [x for x in p.get("sources") or [] if isinstance(x, dict)])
             for i, (p, m) in enumerate(zip(raw_parts, messages, strict=True))]
    sent = int(answer.get("tokens") or 0)
    history = int(answer.get("history_tokens") or 0)
    tool_tokens = int(answer.get("tool_tokens") or 0)
    breakdown = answer.get("breakdown")
    if not isinstance(breakdown, dict):
        breakdown = {}
        for p in parts:
            breakdown[p.kind] = breakdown.get(p.kind, 0) + p.tokens
        breakdown["tool_definitions"] = tool_tokens
        breakdown["free"] = max(0, budget - sent)
    return SentView(
        session_id=str(answer.get("session_id", "")), messages=messages, parts=parts,
        budget=budget, sent_tokens=sent, history_tokens=history,
        sent_usage=float(answer.get("sent_usage", round(sent / budget, 4))),
        history_usage=float(answer.get("history_usage", answer.get("usage",
                                                                   round(history / budget, 4)))),
        tool_tokens=tool_tokens, breakdown={k: int(v or 0) for k, v in breakdown.items()},
        band=str(answer.get("band") or ""), why=str(answer.get("why") or ""),
        fallback=fallback, answer=answer)


# --- FALLBACK, guarded: used only for a daemon whose context answer has no `parts` (before
# api additions of the context-quality work). Each message's kind is derived from the rolling
# summary's and gap texts' prefixes, the cached tool messages spliced before the newest user
# message, and the roles; tokens and entry ids are unknown (0 / none) there.
_MARKER = re.compile(r"^\[\d+ messages? omitted\]$")


def fallback_parts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    messages = [m for m in answer.get("messages") or [] if isinstance(m, dict)]
    n = len(messages)
    cached = int((answer.get("cached_tools") or {}).get("messages") or 0)
    cached_at: set[int] = set()
    if cached:
        end = n - 1 if n and messages[-1].get("role") == "user" else n
        cached_at = set(range(max(0, end - cached), end))
    out = []
    for i, m in enumerate(messages):
        role = m.get("role")
        content = str(m.get("content") or "")
        mark = "kept"
        if i in cached_at:
            kind = "cached_tool_result"
        elif role == "system" and content.startswith("[Conversation summary]"):
            kind, mark = "rolling_summary", "summarized"
        elif content.startswith("[Summary of ") and "earlier messages" in content[:60]:
            kind, mark = "gap_summary", "summarized"
        elif content.startswith("[Summary of "):
            kind, mark = "linked_summary", "summarized"
        elif _MARKER.match(content):
            kind, mark = "omission_marker", "omitted"
        elif role == "system":
            kind = "system_prompt"
        elif m.get("tool_calls"):
            kind = "tool_call"
        elif role == "tool":
            kind = "tool_result"
        else:
            kind = "message"
        out.append({"kind": kind, "tokens": 0, "entry_ids": [], "summary_id": None,
                    "score": None, "mark": mark})
    return out

# --- end of FALLBACK
