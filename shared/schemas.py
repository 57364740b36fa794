"""The protocol's parameter shapes: ids, entries, options maps and the export file, built from
the specs of ``memman.params``. The method declarations (``memman.api``) use them; the daemon
checks every request against them before a handler runs, and nowhere else (a tier trusts what
it is given).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from memman.errors import invalid_params
from memman.params import (
    CHAT_TOOL_CALL,
    COUNT,
    MAX_TOKENS,
    METADATA,
    ROW_ID,
    TIMESTAMP,
    TOKENS,
    TOOL_CALL,
    AnyOf,
    Array,
    Bool,
    Float,
    Id,
    Int,
    Map,
    Nullable,
    Spec,
    Stored,
    Str,
)

# --- entries: the one list of types and roles ------------------------------------------------
#: entry type -> the role an entry of that type gets when the caller names none
DEFAULT_ROLE = {"message": "user", "tool_call": "assistant", "tool_result": "tool",
                "context": "system", "summary": "system"}
ENTRY_TYPES = tuple(DEFAULT_ROLE)
ROLES = ("system", "user", "assistant", "tool")

# --- ids and small shapes shared by several nouns ------------------------------------------
SESSION_ID = Id("s1")
USER_ID = Id("u1")
TENANT_ID = Id("t1")
MODEL = Id("gpt-4o-mini")
TOOL = Str(min_len=1, max_bytes=1024, doc="a tool name")
TOOL_PARAMS = Map(rest=Stored(), doc="a map (the tool's parameters)", empty_array_ok=True)
DURATION = Int(1, 2**31, doc="a whole number of exchanges >= 1")
TTL = Nullable(Float(0.0, 1e10, doc="seconds (a finite number >= 0)"))
LIMIT = Int(0, 10_000, doc="an integer from 0 (the default) to 10000")
MEMORY_TYPE = Str(max_bytes=64, example="episodic")
COSINE = Float(-1.0, 1.0, doc="a cosine similarity from -1 to 1")
CALL_ID = Nullable(Str(max_bytes=1024))
AGENT = Str(max_bytes=128, no_nul=True, doc="an agent's name (claude-code, codex; empty: none)")
PROJECT = Str(max_bytes=4096, no_nul=True, doc="a project: its directory (empty: none)")
SCOPE_FILTER = Map({"session_id": Id(), "user_id": Id(), "tenant_id": Id()})

_LATEST = 32503680000.0  #: year 3000


class Date(Spec):
    """When an entry happened (replayed history): unix seconds, or ISO 8601 text (a date
    without a zone is UTC); normalized to unix seconds, 1970 to 3000."""

    doc = "unix seconds or an ISO 8601 date"
    py_type = "float | str"

    def check(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):
            raise invalid_params(path, "expected unix seconds or an ISO 8601 date")
        if isinstance(value, bytes):
            value = Str().check(value, path)
        if isinstance(value, str):
            try:
                d = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                raise invalid_params(path, "expected unix seconds or an ISO 8601 date; got "
                                     f"{value[:40]!r}") from None
            ts = (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()
        else:
            try:
                ts = float(value)
            except OverflowError:  # an integer beyond any float
                ts = -1.0
            if not math.isfinite(ts):
                ts = -1.0
        if not 0.0 <= ts < _LATEST:
            raise invalid_params(path, "expected a time between 1970 and 3000")
        return ts

    def sample(self) -> float:
        return 1_700_000_000.0

    def edge_samples(self) -> list[Any]:
        return [0, 1_700_000_000.5, "2024-05-01", "2024-05-01T10:00:00Z", _LATEST - 1]

    def bad_samples(self) -> list[Any]:
        return [True, -1, _LATEST, float("nan"), "yesterday", b"\xff", [], {}]


def _tool_result_has_its_call(entry: dict[str, Any], path: str) -> None:
    role = entry.get("role") or DEFAULT_ROLE[entry.get("type", "message")]
    if role == "tool" and not entry.get("tool_call_id"):
        raise invalid_params(f"{path}.tool_call_id",
                             "a tool result needs the id of the call it answers")


def _names_its_tool(result: dict[str, Any], path: str) -> None:
    if not (result.get("tool") or result.get("tool_name")):
        raise invalid_params(f"{path}.tool", "expected the tool's name")


#: one entry of a session's log, as ``memman_session_add`` takes it
ENTRY_IN = Map({
    "type": Str(choices=ENTRY_TYPES),
    "role": Nullable(Str(choices=ROLES)),
    "content": Nullable(Str()),
    "name": Nullable(Str(max_bytes=1024)),
    "tool_call_id": Nullable(Str(max_bytes=1024)),
    "tool_calls": Nullable(Array(TOOL_CALL)),
    "metadata": Nullable(METADATA),
    "pinned": Bool(),
    "created_at": Nullable(Date()),
}, rest=Stored(), empty_array_ok=False, validate=_tool_result_has_its_call)

def _tool_definition(t: dict[str, Any], path: str) -> None:
    """A tool definition as the chat API takes it: ``{type: function, function: {name,
    parameters}}`` (or the function map itself); parameters a JSON schema (a map)."""
    fn = t.get("function", t)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise invalid_params(f"{path}.function.name", "expected a string")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise invalid_params(f"{path}.function.parameters", "expected a map (JSON schema)")
    props = params.get("properties") if isinstance(params, dict) else None
    if props is not None and not isinstance(props, dict):
        raise invalid_params(f"{path}.function.parameters.properties", "expected a map")


#: one tool definition (the chat API's ``tools=`` item); counted, never interpreted
TOOL_DEFINITION = Map(rest=Stored(), empty_array_ok=False, validate=_tool_definition,
                      doc="a map {type: function, function: {name, parameters}}")
TOOL_DEFINITIONS = Array(TOOL_DEFINITION, doc="an array of tool definitions")
#: a question: any text (a huge one is ranked by a bounded excerpt of it)
QUERY = Str(doc="the question as a string")

#: context and preview options: the one check (an undeclared key is refused, naming it)
CONTEXT_OPTS = Map({"max_tokens": MAX_TOKENS, "model": MODEL, "peek": Bool(),
                    "query": Nullable(QUERY), "tools": Nullable(TOOL_DEFINITIONS),
                    "recall": Bool()})
CACHE_OPTS = Map({"duration": DURATION, "ttl_s": TTL, "call_id": CALL_ID})
#: one proactive tool result of ``memman_session_inject``
INJECTED_RESULT = Map({
    "tool": TOOL, "tool_name": TOOL, "params": TOOL_PARAMS, "parameters": TOOL_PARAMS,
    "result": Stored(), "duration": DURATION, "ttl_s": TTL, "call_id": CALL_ID},
    required=("result",), empty_array_ok=False, validate=_names_its_tool)


#: a chat message as the API takes it (memman_count_tokens)
CHAT_MESSAGE = Map({"role": Str(), "content": Nullable(Stored()), "name": Nullable(Str()),
                    "tool_call_id": Nullable(Str()),
                    "tool_calls": Nullable(Array(CHAT_TOOL_CALL))},
                   rest=Stored(), empty_array_ok=False)

# --- the export file (memman_session_export's answer, memman_session_import's data) ----------
FORMAT = "memman.session/1"

EXCHANGE = Map({"question": Str(), "answer": Str(), "answer_bytes": COUNT, "summarized": Bool(),
                 "at": TIMESTAMP, "first_id": ROW_ID, "last_id": ROW_ID},
                required=("question", "answer", "answer_bytes", "summarized", "at"),
                empty_array_ok=False)
CYCLE = Map({"user_question": Str(), "agent_message_ids": Array(ROW_ID),
              "final_answer": Nullable(Str()), "start_id": ROW_ID}, empty_array_ok=False)
USAGE = Map({"at": TIMESTAMP, "prompt_tokens": TOKENS, "completion_tokens": TOKENS,
              "memman_tokens": Nullable(TOKENS), "drift": Nullable(Int(-(2**41), 2**41))},
             required=("at", "prompt_tokens", "completion_tokens"), empty_array_ok=False)
META = Map({
    "user_id": Id(), "tenant_id": Id(), "model": Id(),
    "max_tokens": MAX_TOKENS,
    "created_at": TIMESTAMP, "updated_at": TIMESTAMP, "opened_at": TIMESTAMP, "summary": Str(),
    "exchanges": Array(EXCHANGE), "cycle": CYCLE, "injection_done": Bool(), "recall": Bool(),
    "counters": Map(rest=COUNT), "usage": Array(USAGE, max_items=10_000),
    "agent": AGENT, "project": PROJECT, "recall_project": Bool(),
})
ENTRY = Map({
    "id": ROW_ID, "session_id": Str(), "type": Str(choices=ENTRY_TYPES),
    "role": Str(choices=ROLES), "content": Str(), "tokens": TOKENS,
    "created_at": Date(),  # the one rule of an entry's time, as memman_session_add has it
    # the same shapes as ENTRY_IN's
    "name": Nullable(Str(max_bytes=1024)), "tool_call_id": Nullable(Str(max_bytes=1024)),
    "tool_calls": Nullable(Array(TOOL_CALL)),
    "metadata": METADATA, "pinned": Bool(), "summary_id": Nullable(ROW_ID),
}, required=("id", "type", "role", "content", "tokens", "created_at"), empty_array_ok=False)
SUMMARY = Map({
    "id": ROW_ID, "session_id": Str(), "content": Str(), "entry_ids": Array(ROW_ID),
    "tokens": TOKENS, "original_tokens": TOKENS, "ratio": Float(0.0, 1e12),
    "start": TIMESTAMP, "end": TIMESTAMP, "created_at": TIMESTAMP, "source": Str(),
    "removed_entry_ids": Array(ROW_ID),
}, required=("id", "content", "entry_ids", "tokens", "original_tokens", "ratio", "start", "end",
             "created_at"), empty_array_ok=False)
#: what memman_session_import accepts as ``data`` (what memman_session_export produces)
EXPORT = Map({
    "format": Str(choices=(FORMAT,)), "session_id": Nullable(Id()), "meta": META,
    "entries": Array(ENTRY), "summaries": Array(SUMMARY),
    "links": Array(Map({"summary_id": ROW_ID, "entry_ids": Array(ROW_ID)}, empty_array_ok=False)),
    "exchanges": Array(EXCHANGE), "cycle": CYCLE, "stats": Map(rest=Stored()),
    "total_entries": COUNT, "next_after_id": Nullable(ROW_ID),
}, empty_array_ok=False, doc="a map produced by memman_session_export")

#: ``memman_docs_remove``'s ``ref``: a doc_id, or the id of one of its chunks
DOC_REF = AnyOf((Id(), ROW_ID))
#: ``memman_memory_forget``'s ``record_id``: ``memory:N``, ``entry:N`` or ``entry:SESSION#N``
#: (a bare number only when it names one thing: the handler decides)
RECORD_REF = AnyOf((ROW_ID, Str(min_len=3, max_bytes=1100,
                                doc="a typed id: memory:N, entry:N or entry:SESSION#N")))
