"""The in-memory session model the daemon serves reads from.

SQLite (store.py) is the durable record of these objects; the daemon loads them at start and
mutates them in place. Every type here converts to and from a plain dict (``to_wire`` /
``from_wire``) for the protocol, export and storage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from memman.schemas import ENTRY_TYPES, ROLES  # noqa: F401 - the one list, with the schema


@dataclass
class Entry:
    """One item of a session's lossless entry log."""

    id: int  #: unique across the daemon, assigned at insert, increasing
    session_id: str
    type: str  #: one of ENTRY_TYPES
    role: str  #: one of ROLES
    content: str
    tokens: int  #: chat-format tokens of this entry as one message (incl. per-message overhead)
    created_at: float  #: unix seconds
    name: str | None = None
    tool_call_id: str | None = None  #: for role "tool": the call it answers
    tool_calls: list[dict[str, Any]] | None = None  #: for an assistant tool_call entry
    metadata: dict[str, Any] = field(default_factory=dict)
    pinned: bool = False
    summary_id: int | None = None  #: set when compressed: the Summary that replaced it

    @property
    def active(self) -> bool:
        """Still in the active set (not folded into a compression summary)."""
        return self.summary_id is None

    def to_wire(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _ENTRY_FIELDS}  # shallow: faster than asdict

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Entry:
        if d.keys() == _ENTRY_KEYS:  # as ``to_wire`` writes it (a start decodes every entry)
            return cls(**d)
        return cls(**{k: d[k] for k in _ENTRY_FIELDS if k in d})

    def chat_message(self) -> dict[str, Any]:
        """This entry as an OpenAI chat-completions message."""
        msg: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name and self.role != "tool":
            msg["name"] = self.name
        if self.role == "tool":
            msg["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
            if not self.content:
                msg["content"] = None
        return msg


_ENTRY_FIELDS = tuple(Entry.__dataclass_fields__)
_ENTRY_KEYS = frozenset(_ENTRY_FIELDS)


@dataclass
class Summary:
    """A compression summary (the compression design) linking the entries it replaced."""

    id: int  #: from the same id sequence as entries
    session_id: str
    content: str
    entry_ids: list[int]  #: the original entries, in log order
    tokens: int  #: tokens of this summary as one message
    original_tokens: int  #: tokens of the entries it replaced
    ratio: float  #: original_tokens / tokens (e.g. 3.5 means 3.5x smaller)
    start: float  #: created_at of the first replaced entry (unix seconds)
    end: float  #: created_at of the last replaced entry
    created_at: float
    source: str = "fallback"  #: "llm" or "fallback"
    #: entries this summary linked that were removed on request since (memman_session_remove)
    removed_entry_ids: list[int] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        # shallow, with copies of the id lists (``asdict`` deep-copies every id: a thousand-
        # entry fold spent tens of ms here on the event loop)
        d = {f: getattr(self, f) for f in Summary.__dataclass_fields__}
        d["entry_ids"] = list(self.entry_ids)
        d["removed_entry_ids"] = list(self.removed_entry_ids)
        return d

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Summary:
        return cls(**{k: d[k] for k in Summary.__dataclass_fields__ if k in d})


@dataclass
class Exchange:
    """One finished Q&A cycle (the Q&A-cycle design)."""

    question: str
    answer: str  #: the answer as kept: summarized to ~500 B when it was over 750 B
    answer_bytes: int  #: size of the original answer
    summarized: bool
    at: float
    first_id: int = 0  #: the exchange's entries in the log: ids first_id..last_id
    last_id: int = 0


@dataclass
class Cycle:
    """The Q&A cycle in progress (the Q&A-cycle design)."""

    user_question: str = ""
    agent_message_ids: list[int] = field(default_factory=list)
    final_answer: str | None = None
    start_id: int = 0  #: entries with an id >= this belong to the cycle in progress


@dataclass
class SessionMeta:
    """Per-session state besides the entry log, persisted as one row."""

    user_id: str = "default"
    tenant_id: str = "default"
    model: str = "gpt-4o-mini"
    max_tokens: int = 8000  #: the context budget (tokens)
    created_at: float = 0.0
    updated_at: float = 0.0
    #: when this session (under this id) began here: its open or its import. A session deleted
    #: and opened again under the same id is a new one; undo compares this with the action's
    #: time. 0: written before the field existed (``created_at`` stands for it)
    opened_at: float = 0.0
    summary: str = ""  #: the Q&A-cycle design rolling summary of exchanges that left the window
    exchanges: list[Exchange] = field(default_factory=list)
    cycle: Cycle = field(default_factory=Cycle)
    injection_done: bool = False
    recall: bool = True  #: its entries are recalled in the user's other sessions, and it recalls theirs
    agent: str = ""  #: the coding agent whose conversation it logs ("claude-code", "codex"; "" none)
    project: str = ""  #: the project (a directory: the git root of the agent's cwd) it belongs to
    #: it recalls only sessions of its own project, and only they recall it (``memman.scope``)
    recall_project: bool = False
    counters: dict[str, int] = field(default_factory=dict)  #: llm_compressions, compressions, ...
    usage: list[dict[str, Any]] = field(default_factory=list)  #: reported provider usage, newest last

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> SessionMeta:
        d = dict(d)
        d["exchanges"] = [Exchange(**x) for x in d.get("exchanges", [])]
        d["cycle"] = Cycle(**d.get("cycle", {}))
        return cls(**{k: d[k] for k in SessionMeta.__dataclass_fields__ if k in d})


@dataclass
class Session:
    id: str
    meta: SessionMeta
    entries: list[Entry] = field(default_factory=list)  #: the whole log, in insert order
    summaries: dict[int, Summary] = field(default_factory=dict)
    by_id: dict[int, Entry] = field(default_factory=dict)
    active_tokens: int = 0  #: tokens of entries not compressed away
    active_count: int = 0

    def append(self, entry: Entry) -> None:
        self.entries.append(entry)
        self.by_id[entry.id] = entry
        # last activity is never older than the newest entry; the same rule rebuilds it at load
        # (an add writes only its entry row, not the session's)
        if entry.created_at > self.meta.updated_at:
            self.meta.updated_at = entry.created_at
        if entry.active:
            self.active_tokens += entry.tokens
            self.active_count += 1

    def recount(self) -> None:
        active = [e for e in self.entries if e.active]
        self.active_tokens = sum(e.tokens for e in active)
        self.active_count = len(active)

    def overview(self) -> dict[str, Any]:
        """The small per-session row the session list and the TUI overview show."""
        m = self.meta
        return {
            "session_id": self.id,
            "user_id": m.user_id,
            "tenant_id": m.tenant_id,
            "model": m.model,
            "max_tokens": m.max_tokens,
            "entries": len(self.entries),
            "active_entries": self.active_count,
            "active_tokens": self.active_tokens,
            "summaries": len(self.summaries),
            "exchanges": len(m.exchanges),
            "summary_bytes": len(m.summary.encode()),
            "created_at": m.created_at,
            "updated_at": m.updated_at,
            "counters": dict(m.counters),
            "agent": m.agent,
            "project": m.project,
        }
