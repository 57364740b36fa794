"""The recall index's storage interface (``recall/index.py`` is its one user).

The index's corpus is every entry of a user's sessions. This daemon's own entries come from its
session log (sessions always stay in the local SQLite file); what is kept beside them is the
search model's vector of each entry and the entries a session no longer recalls. With a shared
store, the corpus also holds the entries other daemons' sessions logged: ``arrived`` and
``removed`` hand this daemon's changes over (queued, never awaited on the add path), and
``on_change`` receives the others' rows, removals and vectors as they come.

Two implementations: ``storage/sqlite/recall.py`` (``LocalRecall``: nothing crosses hosts) and
``storage/postgres/recall.py`` (``SharedRecall``: the same local part, plus a shared table of
recall rows). ``backend_for`` chooses; the index never asks which one it has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from memman_daemon.model import Entry, Session

#: ids of other daemons' entries in this daemon's corpus: this plus the shared row's id. Entry
#: ids are per host (SQLite's), so a shared row cannot keep its own; 2**52 is far above any
#: local id and still exact in JSON (below 2**53)
REMOTE_BASE = 1 << 52

#: (corpus id, session id, model, unit vector) — a vector to keep
VectorRow = tuple[int, str, str, "np.ndarray"]
#: (corpus id, session id, model, packed token vectors, tokens kept) — token vectors to keep
TokenRow = tuple[int, str, str, "np.ndarray", int]
#: an entry of this daemon forgotten for recall on another host: (entry id, session id, the
#: entry's created_at, the digest of what it said — ``recall/index.py``'s ``forget_digest``;
#: '' when unknown). The digest finds it again under a new id (an import with replace)
Forgotten = tuple[int, str, float, str]


@dataclass(frozen=True, slots=True)
class RemoteRow:
    """An entry of another daemon's session, as the shared table holds it."""

    id: int  #: its id in this corpus (``REMOTE_BASE`` + the shared row's id)
    origin: str  #: the store it was logged in (its origin id: ``storage/sqlite/identity.py``)
    session_id: str  #: the session on that host (the recalled line names it)
    tenant_id: str
    user_id: str
    type: str
    role: str
    name: str | None
    content: str
    text: str  #: what it is indexed as (its content, or a call's name and arguments)
    created_at: float
    model: str  #: the search model its origin embeds with ('' when none)


@dataclass
class Change:
    """What other daemons changed since the last ``Change``."""

    rows: list[RemoteRow] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)  #: corpus ids removed
    vectors: list[tuple[int, bytes]] = field(default_factory=list)  #: (corpus id, float32)
    #: (corpus id, tokens kept, packed token vectors: ``search/late.py``'s ``pack``)
    tokens: list[tuple[int, int, bytes]] = field(default_factory=list)
    #: this daemon's entries a user forgot for recall on another host (``Forgotten``);
    #: already recorded in the local file when they come
    forgotten: list[Forgotten] = field(default_factory=list)


class RecallStorage(Protocol):
    """Where the recall index keeps what it does not compute from the session log."""

    def attach(self, local: Callable[[], Iterable[tuple[Session, list[tuple[Entry, str]]]]],
               on_change: Callable[[Change], list[Any]], model: Callable[[], str],
               digest: Callable[[int, str, float], str] | None = None) -> None:
        """``local()``: this daemon's shareable entries by session, each with the text it is
        indexed as, at the moment of the call (the truth a shared table is brought in line
        with after an outage); ``on_change``:
        where other daemons' changes go (it answers the ops to keep in the local file as a
        consequence: exclusions carried to a statement written again under a new id); ``model()``: the search model in force;
        ``digest(entry id, session id, created_at)``: what this daemon's entry said, as a
        ``Forgotten`` records it ('' when it has no such entry)."""

    async def load(self) -> None:
        """Start (after the index built its corpus from the session log)."""

    async def close(self) -> None: ...

    async def vectors(self, model: str, after: int = -1, limit: int = -1
                      ) -> list[tuple[int, bytes]]:
        """The stored vectors of ``model`` of this daemon's entries: (entry id, float32), in
        entry id order, after entry ``after``, at most ``limit`` (-1: all)."""

    async def save_vectors(self, rows: list[VectorRow]) -> None:
        """Keep vectors (of this daemon's entries and, shared, of others' rows)."""

    async def tokens(self, model: str, after: int = -1, limit: int = -1
                     ) -> list[tuple[int, tuple[int, bytes]]]:
        """The stored packed token matrices of ``model`` of this daemon's entries: (entry id,
        (tokens kept, bytes)), as ``vectors``."""

    async def save_tokens(self, rows: list[TokenRow]) -> None:
        """Keep packed token vectors (of this daemon's entries and, shared, of others'
        rows)."""

    async def exclusions(self) -> list[tuple[str, int, str]]:
        """(session id, corpus id, what it said) triples: what a session no longer recalls;
        ``said`` (recall/index.py's ``said_key``) is set for another daemon's row only."""

    def exclude_op(self, session_id: str, entry_id: int, at: float, said: str = "") -> Any:
        """The operation (for the local file's ``write``) that excludes one entry."""

    def include_op(self, session_id: str, entry_id: int) -> Any: ...

    async def write_exclusion(self, session_id: str, entry_id: int, excluded: bool, at: float,
                              ops: list[Any], said: str = "") -> None:
        """Exclude (or include again) one entry for a session, with ``ops`` (its audit row)
        in the same transaction of the local file (exclusions are the session's state: they
        stay on its host)."""

    async def forgotten(self) -> list[Forgotten]:
        """This daemon's entries forgotten for recall on another host (``Change.forgotten``):
        they stay in their session; no other session, here or elsewhere, recalls them."""

    async def forget(self, entry_id: int, ops: list[Any]) -> None:
        """Another daemon's entry (``entry_id`` its corpus id) leaves recall on every host:
        its shared row becomes a tombstone marked forgotten (awaited; ``SharedUnavailable``
        while the store is down), then ``ops`` (its audit row) are written to the local file."""

    def resync(self) -> None:
        """A session's recall flag changed: bring the shared rows in line with ``local()``
        again (its rows leave, or come back with their vectors)."""

    def arrived(self, s: Session, entries: list[tuple[Entry, str]]) -> None:
        """Entries of ``s`` were indexed, each with its text (private ones, and those of a
        session that opted out of recall, are never handed over). Queues."""

    def removed(self, entry_ids: list[int]) -> None:
        """This daemon's entries left their session (deleted, forgotten). Queues."""

    def session_removed(self, session_id: str) -> None:
        """Every entry of this daemon's session left (deleted, cleared). Queues."""

    def stats(self) -> dict[str, Any]: ...
