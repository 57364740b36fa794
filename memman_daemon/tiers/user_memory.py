"""User memory (the three-tier and four-layer designs): working, episodic, semantic and procedural layers.

- **working** is the session scratchpad (``scratchpad.py``); through this API it is appended
  to, searched (the four-layer design's term scoring), compacted and cleared for one user's sessions.
- **episodic**: searchable past events. Kept only in SQLite (there may be 100k of them) and
  found through FTS5; memory holds counts.
- **semantic**: preferences, key → value (the four-layer design's learn / recall, the three-tier design's
  ``preferences.update/get``). Held in memory; recall is a dict read.
- **procedural**: condition → action rules, and playbooks (the three-tier design: flow, slots, tool_calls,
  outcome, user_query). Held in memory; playbooks are found by flow id (exact) or by query.

Search ranks with SQLite FTS5's BM25 plus the four-layer design's recency bonus (up to
``memory.recency_bonus`` for entries updated within ``memory.recency_window_s``, falling
linearly). With an embeddings endpoint configured, vectors are stored as well and ranking is
hybrid (see docs/tiers.md). Compaction archives older entries behind a summary entry instead
of deleting them; only ``clear`` deletes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from memman.config import DEFAULT_MODEL
from memman.errors import CONFLICT, NOT_FOUND, MemmanError, invalid_params
from memman_daemon.params import MAX_ID_BYTES
from memman_daemon.search import fts
from memman_daemon.search.hybrid import (
    BM25,
    VECTOR,
    content_words,
    may_be_duplicate,
    memory_vector_text,
    rrf,
)
from memman_daemon.search.vector_matrix import blobs_to_matrix
from memman_daemon.storage.sqlite import fts as fts_rows
from memman_daemon.storage.sqlite import memories as memory_rows
from memman_daemon.storage.sqlite.store import ConstraintError, Op
from memman_daemon.tiers.scratchpad import normalize
from memman_daemon.tiers.searchable import SearchableTier

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.search.reembed import VectorSync
    from memman_daemon.sessions import Sessions
    from memman_daemon.storage.sqlite.store import Store
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tiers.scratchpad import Scratchpad
    from memman_daemon.tokens import TokenCounter

MEMORY_TYPES = ("working", "episodic", "semantic", "procedural")
STORED_TYPES = ("episodic", "semantic", "procedural")
#: kinds found by meaning only above memory.similarity_threshold (the three-tier design's key types)
KEYED_KINDS = ("preference", "rule", "playbook")
_WORD = re.compile(r"\w+", re.UNICODE)
T = TypeVar("T")
#: a keyed change refused by the unique index (a concurrent one won) is prepared again this often
_RACE_ATTEMPTS = 4


@dataclass
class MemoryRecord:
    """One stored memory. ``kind`` is entry, preference, rule, playbook or summary."""

    id: int
    user_id: str
    type: str
    kind: str
    key: str | None  #: preference key, rule condition or playbook flow
    content: str  #: entry text, preference value, rule action, playbook query + outcome
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0  #: unix seconds
    updated_at: float = 0.0
    archived_by: int | None = None  #: compacted into this summary (0: archived, no summary)

    _COLS = memory_rows.COLUMNS

    @classmethod
    def from_row(cls, r: Any) -> MemoryRecord:
        return cls(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9])

    def to_wire(self) -> dict[str, Any]:
        d = asdict(self)
        d["timestamp"] = self.created_at
        if self.kind == "preference":
            d["value"] = self.content
        elif self.kind == "rule":
            d["condition"], d["action"] = self.key, self.content
        elif self.kind == "playbook":
            for k in ("flow", "slots", "tool_calls", "outcome", "user_query"):
                d[k] = self.metadata.get(k)
        return d

    def row(self) -> tuple[Any, ...]:
        """The record as a row of ``memories`` (``metadata`` as JSON text)."""
        return (self.id, self.user_id, self.type, self.kind, self.key, self.content,
                json.dumps(self.metadata, ensure_ascii=False, default=str), self.created_at,
                self.updated_at, self.archived_by)

    def insert_op(self) -> Op:
        return memory_rows.upsert_op(self.row())


@dataclass
class Change:
    """A prepared memory change: commit ``ops`` (with any others), then ``apply()``."""

    record: MemoryRecord
    ops: list[Op]
    apply: Callable[[], None]
    event: str  #: the memory event kind to publish after commit
    previous: MemoryRecord | None = None
    changed: bool = True


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression: each word quoted, any word may match (BM25 ranks)."""
    return fts.match_expr(fts.words(text))


def term_score(text: str, terms: list[str]) -> float:
    """The four-layer design's term score: 2 per exact word occurrence, 1 for a term inside a word."""
    lowered = text.lower()
    words = _WORD.findall(lowered)
    score = 0.0
    for t in terms:
        exact = sum(1 for w in words if w == t)
        if exact:
            score += 2 * exact
        elif t in lowered:
            score += 1
    return score


class UserMemory(SearchableTier):
    """The episodic, semantic and procedural layers of every user (working memory is the
    scratchpad's). Vector scopes are ``(user_id, type)``."""

    stats_key = "memory"

    def __init__(self, config: Config, clock: Clock, store: Store, events: EventBus,
                 tokens: TokenCounter, embedder: Embedder, vector_sync: VectorSync,
                 audit: Recorder, sessions: Sessions, scratchpad: Scratchpad, *,
                 read_only: bool = False) -> None:
        super().__init__(config, clock, store, events, tokens, embedder, vector_sync, audit)
        self.sessions = sessions
        self.scratchpad = scratchpad
        self.read_only = read_only
        self.prefs: dict[str, dict[str, MemoryRecord]] = {}
        self.rules: dict[str, dict[str, MemoryRecord]] = {}
        self.playbooks: dict[str, list[MemoryRecord]] = {}
        self.episodic_count: dict[str, int] = {}
        self._ids = itertools.count(1)
        self.duplicates = 0

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        store = self.store
        self.prefs.clear()
        self.rules.clear()
        self.playbooks.clear()
        self.episodic_count.clear()
        for r in await memory_rows.live_keyed(store):
            self._index(MemoryRecord.from_row(r))
        for uid, n in await memory_rows.episodic_counts(store):
            self.episodic_count[uid] = n
        self._ids = itertools.count(await memory_rows.max_id(store) + 1)
        self.vectors.open()

    async def close(self) -> None:
        self.vectors.close()

    def stats(self) -> dict[str, Any]:
        return {"users": len(set(self.prefs) | set(self.rules) | set(self.playbooks)
                             | set(self.episodic_count)),
                "episodic": sum(self.episodic_count.values()),
                "preferences": sum(len(v) for v in self.prefs.values()),
                "rules": sum(len(v) for v in self.rules.values()),
                "playbooks": sum(len(v) for v in self.playbooks.values()),
                "searches": self.searches, "search_mode": self.search_mode,
                "duplicates": self.duplicates, "vector_backend": self.vectors.backend,
                "vector_index": self.vscopes.stats()}

    @property
    def search_mode(self) -> str:
        return "hybrid" if self.embedder.enabled else "fts"

    def _index(self, rec: MemoryRecord) -> None:
        if rec.kind == "preference":
            self.prefs.setdefault(rec.user_id, {})[rec.key or ""] = rec
        elif rec.kind == "rule":
            self.rules.setdefault(rec.user_id, {})[rec.key or ""] = rec
        elif rec.kind == "playbook":
            books = self.playbooks.setdefault(rec.user_id, [])
            books[:] = [b for b in books if b.id != rec.id] + [rec]

    def _unindex(self, rec: MemoryRecord) -> None:
        if rec.kind == "preference":
            self.prefs.get(rec.user_id, {}).pop(rec.key or "", None)
        elif rec.kind == "rule":
            self.rules.get(rec.user_id, {}).pop(rec.key or "", None)
        elif rec.kind == "playbook":
            books = self.playbooks.get(rec.user_id, [])
            books[:] = [b for b in books if b.id != rec.id]

    def _publish(self, kind: str, user_id: str, **data: Any) -> None:
        self.events.publish("memory", kind, data, user_id=user_id)

    # --- vectors -----------------------------------------------------------------------
    @staticmethod
    def vector_text(rec: MemoryRecord) -> str:
        return memory_vector_text(rec.kind, rec.key, rec.content, rec.metadata)

    async def _load_scope(self, key: Hashable) -> tuple[list[int], np.ndarray]:
        user_id, type_ = key  # type: ignore[misc]
        emb = self.embedder
        dim = self.vscopes.dim or 0
        found = await memory_rows.scope_vectors(self.store, user_id, type_, emb.model_id, dim)
        return [r[0] for r in found], blobs_to_matrix([r[1] for r in found], dim)

    async def _scope(self, user_id: str, type_: str, dim: int):  # -> VectorMatrix
        self.vscopes.dim = dim
        return await self.vscopes.get((user_id, type_), dim)

    async def _vector_ops(self, recs: list[MemoryRecord],
                          vecs: np.ndarray | None = None) -> tuple[list[Op], Callable[[], None]]:
        """Ops storing the records' vectors (embedded now unless given) and a callable that
        puts them in the in-memory index after commit. Without vectors (embeddings off or
        failing) the background worker fills them in later."""
        emb = self.embedder
        if not emb.enabled or not recs:
            return [], lambda: None
        if vecs is None:
            vecs = await emb.embed([self.vector_text(r) for r in recs])
        if vecs is None:
            self.vector_sync.request()
            return [], lambda: None
        model = emb.model_id
        ops = [self._vector_op(r.id, v, model) for r, v in zip(recs, vecs, strict=True)]

        def index() -> None:
            if emb.model_id != model:
                return
            for r, v in zip(recs, vecs, strict=True):
                self.vscopes.add((r.user_id, r.type), [r.id], v[None, :])
        return ops, index

    def _vector_op(self, record_id: int, vec: np.ndarray, model: str) -> Op:
        """The op storing a record's vector (committed with the record)."""
        return memory_rows.vector_op(record_id, vec, model)

    async def count_vector_backlog(self, model_id: str) -> int:
        return await memory_rows.count_vector_backlog(self.store, model_id)

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        """Live records after id ``after`` with no vector of ``model_id``: ``(id, text)``."""
        out = []
        for r in await memory_rows.vector_backlog(self.store, after, model_id, limit):
            rec = MemoryRecord.from_row(r)
            self._backlog_scope[rec.id] = (rec.user_id, rec.type)
            out.append((rec.id, self.vector_text(rec)))
        return out

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None:
        """Write vectors the background worker made (skipping rows deleted meanwhile)."""
        await self.store.write([memory_rows.late_vector_op(i, v, model_id)
                                for i, v in zip(ids, vecs, strict=True)])
        if self.embedder.model_id == model_id:
            self.vscopes.add_stored(self._backlog_scope, ids, vecs)

    def _new(self, user_id: str, type_: str, kind: str, key: str | None, content: str,
             metadata: dict[str, Any], at: float | None = None) -> MemoryRecord:
        now = self.clock.now()
        at = at if at is not None else now
        return MemoryRecord(next(self._ids), user_id, type_, kind, key, content, metadata, at, at)

    async def commit(self, change: Change, extra_ops: list[Op] | None = None,
                     client: str = "") -> None:
        """Write the change (with ``extra_ops`` in the same transaction), then apply it.

        An edit (a record that replaces a previous value) is written to the audit log with the
        previous value, in the same transaction, so a record's history can be read back."""
        ops = change.ops + (extra_ops or [])
        edit = self._edit_audit(change, client)
        if edit is not None:
            ops.append(edit[1])
        if change.changed or extra_ops:
            await self.store.write(ops)
        self._applied(change, edit[0].id if edit else None)

    def _edit_audit(self, change: Change, client: str) -> tuple[Any, Any] | None:
        """The audit record (and its operation) of an edit: a change replacing a value."""
        prev = change.previous
        if not change.changed or prev is None:
            return None
        rec = change.record
        return self.audit.record(
            "edit", rec.content, f"memory:{rec.user_id}#{rec.id}", f"{rec.kind}:{rec.key}",
            client, user_id=rec.user_id, record_id=rec.id, type=rec.type, kind=rec.kind,
            key=rec.key, previous=prev.content, previous_metadata=prev.metadata,
            previous_updated_at=prev.updated_at)

    def _applied(self, change: Change, audit_id: int | None) -> None:
        """After the commit: update this daemon's view and announce the change."""
        if change.changed:
            change.apply()
            data: dict[str, Any] = {"record": change.record.to_wire()}
            if change.previous is not None:
                data["previous"] = change.previous.to_wire()
                data["audit_id"] = audit_id
            self._publish(change.event, change.record.user_id, **data)

    # --- semantic ------------------------------------------------------------------------
    async def prepare_preference(self, user_id: str, key: str, value: str, *, replace: bool,
                                 metadata: dict[str, Any] | None = None) -> Change:
        """Set ``key`` to ``value``. A different existing value is a CONFLICT unless
        ``replace``; the same value is no change."""
        if not key or "\x00" in key or len(key.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
            raise invalid_params("key", f"a key is 1 to {MAX_ID_BYTES} bytes with no NUL")
        old = self.prefs.get(user_id, {}).get(key)
        if old is not None and old.content == value:
            return Change(old, [], lambda: None, "learned", changed=False)
        if old is not None and not replace:
            raise MemmanError(CONFLICT, f"preference {key!r} of user {user_id!r} is already "
                              f"{old.content!r}; the new value {value!r} differs. Pass "
                              "replace=true to overwrite it, or keep the existing one",
                              {"key": key, "existing": old.content, "proposed": value})
        rec = self._new(user_id, "semantic", "preference", key, value, metadata or {})
        if old is not None:
            rec.id, rec.created_at = old.id, old.created_at
        vops, vindex = await self._vector_ops([rec])
        return Change(rec, [rec.insert_op(), *vops], lambda: (self._index(rec), vindex()),
                      "learned", previous=old)

    async def learn(self, user_id: str, key: str, value: Any, opts: dict[str, Any],
                    client: str = "") -> dict[str, Any]:
        """The four-layer design's learn: set a preference, overwriting by default (``opts.replace`` false
        makes a different existing value a CONFLICT). Non-text values are stored as JSON and
        recalled as they were given."""
        replace = opts.get("replace", True)
        meta = dict(opts.get("metadata") or {})
        if not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
            meta["json"] = True

        async def once() -> dict[str, Any]:
            ch = await self.prepare_preference(user_id, key, value, replace=bool(replace),
                                               metadata=meta)
            await self.commit(ch, client=client)
            return {"record": ch.record.to_wire(), "changed": ch.changed,
                    "previous": ch.previous.content if ch.previous else None}
        return await self._decided(once)

    async def _decided(self, once: Callable[[], Awaitable[T]]) -> T:
        """Run a change of a keyed record; when the database refused it because a concurrent
        change of the same user and key committed first (the unique index ``memories_live``),
        prepare it again: it then sees the winner (its value is the ``previous``, or CONFLICT
        when the caller did not ask to replace)."""
        for attempt in range(_RACE_ATTEMPTS):
            try:
                return await once()
            except ConstraintError:
                if attempt == _RACE_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0)  # the winner's own step applies its record first
        raise AssertionError("unreachable")

    def recall(self, user_id: str, key: str) -> dict[str, Any] | None:
        rec = self.prefs.get(user_id, {}).get(key)
        if rec is None:
            return None
        value = json.loads(rec.content) if rec.metadata.get("json") else rec.content
        return {"key": key, "value": value, "timestamp": rec.updated_at,
                "created_at": rec.created_at, "id": rec.id, "metadata": rec.metadata}

    # --- procedural ----------------------------------------------------------------------
    async def prepare_rule(self, user_id: str, condition: str, action: str, *, replace: bool,
                           metadata: dict[str, Any] | None = None) -> Change:
        if not condition:
            raise invalid_params("condition", "must not be empty")
        old = self.rules.get(user_id, {}).get(condition)
        if old is not None and old.content == action:
            return Change(old, [], lambda: None, "appended", changed=False)
        if old is not None and not replace:
            raise MemmanError(CONFLICT, f"rule for condition {condition!r} already says "
                              f"{old.content!r}; the new action {action!r} differs. Pass "
                              "replace=true to overwrite it, or keep the existing one",
                              {"condition": condition, "existing": old.content,
                               "proposed": action})
        rec = self._new(user_id, "procedural", "rule", condition, action, metadata or {})
        if old is not None:
            rec.id, rec.created_at = old.id, old.created_at
        vops, vindex = await self._vector_ops([rec])
        return Change(rec, [rec.insert_op(), *vops], lambda: (self._index(rec), vindex()),
                      "appended", previous=old)

    async def prepare_playbook(self, user_id: str, pb: dict[str, Any], *, replace: bool) -> Change:
        flow = pb.get("flow") or pb.get("flow_dact")
        if not isinstance(flow, str) or not flow:
            raise invalid_params("playbook.flow", "expected the flow id (the three-tier design's flow_dact)")
        user_query = pb.get("user_query") or ""
        outcome = pb.get("outcome") or ""
        slots = pb.get("slots") or {}
        tool_calls = pb.get("tool_calls") or []
        if not isinstance(user_query, str) or not isinstance(outcome, str):
            raise invalid_params("playbook", "user_query and outcome must be strings")
        if not isinstance(slots, dict):
            raise invalid_params("playbook.slots", "expected a map of slot name -> value")
        if not isinstance(tool_calls, list):
            raise invalid_params("playbook.tool_calls", "expected an array")
        meta = {"flow": flow, "slots": slots, "tool_calls": tool_calls, "outcome": outcome,
                "user_query": user_query}
        content = f"{user_query}\n{outcome}".strip()
        old = next((b for b in self.playbooks.get(user_id, []) if b.key == flow
                    and normalize(b.metadata.get("user_query", "")) == normalize(user_query)), None)
        if old is not None and old.metadata == meta:
            return Change(old, [], lambda: None, "appended", changed=False)
        if old is not None and not replace:
            raise MemmanError(CONFLICT, f"a playbook for flow {flow!r} and this query already "
                              f"exists with outcome {old.metadata.get('outcome')!r}; pass "
                              "replace=true to overwrite it", {"flow": flow,
                                                               "existing": old.metadata,
                                                               "proposed": meta})
        rec = self._new(user_id, "procedural", "playbook", flow, content, meta)
        if old is not None:
            rec.id, rec.created_at = old.id, old.created_at
        vops, vindex = await self._vector_ops([rec])
        return Change(rec, [rec.insert_op(), *vops], lambda: (self._index(rec), vindex()),
                      "appended", previous=old)

    # --- append (the four-layer design) -----------------------------------------------------------------
    async def append(self, user_id: str, type_: str, entry: dict[str, Any],
                     client: str = "") -> dict[str, Any]:
        return await self._decided(lambda: self._append(user_id, type_, entry, client))

    async def _append(self, user_id: str, type_: str, entry: dict[str, Any],
                      client: str) -> dict[str, Any]:
        _check_type(type_, MEMORY_TYPES)
        if not isinstance(entry, dict):
            raise invalid_params("entry", "expected a map")
        content = entry.get("content", "")
        if not isinstance(content, str):
            raise invalid_params("entry.content", "expected a string")
        metadata = entry.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise invalid_params("entry.metadata", "expected a map")
        if entry.get("id") is not None:
            metadata = {**metadata, "external_id": entry["id"]}
        if type_ == "working":
            sid = entry.get("session_id") or metadata.get("session_id")
            if not isinstance(sid, str):
                raise invalid_params("entry.session_id", "working memory is a session's "
                                     "scratchpad: name the session")
            s = self.sessions.get(sid)
            if s.meta.user_id != user_id:
                raise invalid_params("entry.session_id", f"session {sid!r} belongs to user "
                                     f"{s.meta.user_id!r}, not {user_id!r}")
            res = await self.scratchpad.write(sid, content, {"metadata": metadata}, client)
            return {"type": "working", "record": res["snippet"], "created": res["created"]}
        if type_ == "semantic":
            key = entry.get("key") or metadata.get("key") or entry.get("id")
            if not isinstance(key, str) or not key:
                raise invalid_params("entry.key", "a semantic entry needs a key (entry.key or "
                                     "metadata.key)")
            ch = await self.prepare_preference(user_id, key, content, replace=True,
                                               metadata=metadata)
        elif type_ == "procedural":
            if "flow" in entry or "flow_dact" in entry or metadata.get("kind") == "playbook":
                pb = {**metadata, **{k: v for k, v in entry.items() if k != "metadata"}}
                ch = await self.prepare_playbook(user_id, pb, replace=True)
            else:
                cond = entry.get("condition") or metadata.get("condition")
                if not isinstance(cond, str) or not cond:
                    raise invalid_params("entry.condition", "a procedural rule needs a condition "
                                         "(entry.condition or metadata.condition); a playbook "
                                         "needs a flow")
                action = entry.get("action") or content
                ch = await self.prepare_rule(user_id, cond, action, replace=True,
                                             metadata=metadata)
        else:
            if not content:
                raise invalid_params("entry.content", "must not be empty")
            at = entry.get("timestamp")
            if at is not None and (not isinstance(at, (int, float)) or isinstance(at, bool)):
                raise invalid_params("entry.timestamp", "expected unix seconds")
            rec = self._new(user_id, "episodic", "entry", None, content, metadata,
                            float(at) if at is not None else None)
            vec = await self.embedder.embed([self.vector_text(rec)])
            if vec is not None and entry.get("dedupe", self.config.memory.dedupe):
                dup = await self._near_duplicate(user_id, vec[0], content)
                if dup is not None:
                    return await self._bump(dup[0], dup[1], rec)
            vops, vindex = await self._vector_ops([rec], vec)

            def bump() -> None:
                self.episodic_count[user_id] = self.episodic_count.get(user_id, 0) + 1
                vindex()
            ch = Change(rec, [rec.insert_op(), *vops], bump, "appended")
        await self.commit(ch, client=client)
        return {"type": type_, "record": ch.record.to_wire(), "created": ch.changed}

    async def _near_duplicate(self, user_id: str, vec: np.ndarray, text: str
                              ) -> tuple[MemoryRecord, float] | None:
        """The user's live episodic entry most similar to ``vec``, if at or above
        ``memory.duplicate_threshold`` and naming the same numbers and identifiers."""
        m = await self._scope(user_id, "episodic", int(vec.shape[0]))
        th = self.config.memory.duplicate_threshold
        close = [(i, s) for i, s in m.search(vec, 5) if s >= th]
        if not close:
            return None
        found = await self._fetch([i for i, _ in close])
        for i, sim in close:
            rec = found.get(i)
            if rec is not None and rec.kind == "entry" and may_be_duplicate(rec.content, text):
                return rec, sim
        return None

    async def _bump(self, old: MemoryRecord, similarity: float,
                    new: MemoryRecord) -> dict[str, Any]:
        """A near-duplicate append: the stored entry's frequency goes up (it counts for
        promotion) and it is touched; no copy is stored."""
        prev = MemoryRecord.from_row((old.id, old.user_id, old.type, old.kind, old.key,
                                      old.content, json.dumps(old.metadata), old.created_at,
                                      old.updated_at, old.archived_by))
        meta = dict(old.metadata)
        meta["frequency"] = int(meta.get("frequency", 1)) + 1
        meta["last_duplicate"] = new.content if new.content != old.content else None
        old.metadata = {k: v for k, v in meta.items() if v is not None}
        old.updated_at = self.clock.now()
        await self.store.write([memory_rows.touch_op(old.id, old.metadata, old.updated_at)])
        self.duplicates += 1
        self._publish("updated", old.user_id, record=old.to_wire(), previous=prev.to_wire(),
                      duplicate=True, similarity=round(similarity, 6))
        return {"type": old.type, "record": old.to_wire(), "created": False,
                "duplicate_of": old.id, "similarity": round(similarity, 6),
                "frequency": old.metadata["frequency"]}

    # --- search --------------------------------------------------------------------------
    async def search(self, user_id: str, type_: str, query: str,
                     opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Best first, each with ``score`` and its parts (``lexical``, ``semantic``,
        ``recency``; in hybrid mode also ``matched`` and ``parts``: rank and score in each
        list, fused score). ``type_`` "" or "all" searches the stored layers together.
        ``opts.flow``: the three-tier design's lookup — exact flow id matches first, then (with a query)
        records similar to the query above ``memory.similarity_threshold``."""
        self.searches += 1
        self.embedder.check_config()
        limit = int(opts.get("limit") or self.config.memory.search_limit)
        if type_ in ("", "all"):
            types: tuple[str, ...] = STORED_TYPES
        else:
            _check_type(type_, MEMORY_TYPES)
            types = (type_,)
        if types == ("working",):
            return self._search_working(user_id, query, limit, opts.get("session_id"))
        kind = opts.get("kind")
        flow = opts.get("flow")
        if flow is not None:
            if not isinstance(flow, str):
                raise invalid_params("opts.flow", "expected the flow id (a string)")
            return await self._lookup(user_id, types, flow, query, limit, kind,
                                      opts.get("threshold"))
        if not query.strip():
            raise invalid_params("query", "must not be empty (or pass opts.flow for playbooks)")
        return await self._search_stored(user_id, types, query, limit, kind,
                                         self.mode_for(opts))

    def mode_for(self, opts: dict[str, Any]) -> str:
        """``opts.mode``: "hybrid" (default with embeddings on), "fts" or "vector"; with
        embeddings off every mode is "fts"."""
        mode = opts.get("mode")
        if mode is not None and mode not in ("hybrid", "fts", "vector"):
            raise invalid_params("opts.mode", "expected hybrid, fts or vector")
        if not self.embedder.enabled:
            return "fts"
        return mode or "hybrid"

    def _recency(self, at: float, now: float) -> float:
        cfg = self.config.memory
        age = max(0.0, now - at)
        if age >= cfg.recency_window_s:
            return 0.0
        return cfg.recency_bonus * (1.0 - age / cfg.recency_window_s)

    async def _bm25(self, user_id: str, types: tuple[str, ...], query: str, limit: int,
                    kind: str | None, content_only: bool = False
                    ) -> tuple[dict[int, float], dict[int, MemoryRecord]]:
        """FTS5 candidates: ``({id: bm25 (higher is better)}, {id: record})``, best first.
        ``content_only``: stop words left out of the query (the hybrid half)."""
        cfg = self.config.memory
        store = self.store
        lexical: dict[int, float] = {}
        rows: dict[int, MemoryRecord] = {}
        total = (sum(self.episodic_count.values()) + sum(len(v) for v in self.prefs.values())
                 + sum(len(v) for v in self.rules.values())
                 + sum(len(v) for v in self.playbooks.values()))
        words = fts.words(query)
        if content_only:
            words = content_words(words)
        match = fts.match_expr(await fts_rows.informative(store, "memories_fts", words, total))
        if match:
            # BM25 over every match is what makes a query of very common words slow. When
            # the words match more than memory.max_scan entries (words that common carry
            # little information), only the newest max_scan matches are ranked — unless
            # that leaves this user fewer than `limit` results, then all are.
            # in a hybrid search the vectors carry the meaning, so BM25 needs fewer rows
            scan = cfg.hybrid_max_scan if content_only else cfg.max_scan
            low = await fts_rows.newest_bound(store, "memories_fts", match, scan)
            found = await memory_rows.fts_ranked(store, match, low, user_id, types, kind,
                                                 cfg.candidates)
            if low and len(found) < limit:
                found = await memory_rows.fts_ranked(store, match, 0, user_id, types, kind,
                                                     cfg.candidates)
            for r in found:
                rec = MemoryRecord.from_row(r)
                rows[rec.id] = rec
                lexical[rec.id] = -r[10]
        return lexical, rows

    async def _nearest(self, user_id: str, types: tuple[str, ...], qv: np.ndarray,
                       k: int) -> list[tuple[int, float]]:
        """The ``k`` records of these layers nearest to ``qv``: ``(id, cosine)`` best first."""
        hits: list[tuple[int, float]] = []
        for t in types:
            m = await self._scope(user_id, t, int(qv.shape[0]))
            hits += m.search(qv, k)
        hits.sort(key=lambda h: -h[1])
        return hits[:k]

    async def _fetch(self, ids: list[int]) -> dict[int, MemoryRecord]:
        if not ids:
            return {}
        found = await memory_rows.live_by_id(self.store, ids)
        return {r[0]: MemoryRecord.from_row(r) for r in found}

    async def _search_stored(self, user_id: str, types: tuple[str, ...], query: str,
                             limit: int, kind: str | None,
                             mode: str = "hybrid") -> list[dict[str, Any]]:
        cfg = self.config.memory
        now = self.clock.now()
        lexical: dict[int, float] = {}
        rows: dict[int, MemoryRecord] = {}
        if mode != "vector":
            lexical, rows = await self._bm25(user_id, types, query, limit, kind,
                                             content_only=mode == "hybrid")
        qv = await self.embedder.embed([query]) if mode != "fts" else None
        if qv is None:  # FTS5 only: BM25 plus the four-layer design's recency bonus
            scored = []
            for rid, rec in rows.items():
                rec_bonus = self._recency(rec.updated_at, now)
                lex = lexical[rid]
                scored.append((round(lex + rec_bonus, 6), rec, lex, rec_bonus))
            scored.sort(key=lambda t: (-t[0], -t[1].id))
            return [{**rec.to_wire(), "score": sc, "lexical": round(lex, 6), "semantic": None,
                     "recency": round(bonus, 6), "matched": [BM25]}
                    for sc, rec, lex, bonus in scored[:limit]]
        # hybrid: ~candidates from BM25 and from vectors, fused by reciprocal rank
        q = qv[0]
        nearest = await self._nearest(user_id, types, q, cfg.candidates)
        missing = [i for i, _ in nearest if i not in rows]
        rows.update(await self._fetch(missing))
        if kind:
            rows = {i: r for i, r in rows.items() if r.kind == kind}
        vec_list = [(i, s) for i, s in nearest if i in rows]
        lex_list = sorted(lexical.items(), key=lambda t: -t[1])
        fused = rrf({BM25: lex_list, VECTOR: vec_list}, cfg.rrf_k,
                    {BM25: cfg.bm25_weight, VECTOR: cfg.vector_weight})
        sims = {i: s for i, s in vec_list}
        need = [f.id for f in fused[:limit * 4] if f.id not in sims]
        for t in types:  # cosine for BM25-only hits too, where their vector is loaded
            m = self.vscopes.scopes.get((user_id, t))
            if m is not None and need:
                sims.update(m.similarities(q, need))
        scored = []
        for f in fused:
            rec = rows.get(f.id)
            if rec is None:
                continue
            if (rec.kind in KEYED_KINDS and BM25 not in f.parts
                    and sims.get(f.id, 0.0) < self.embedder.threshold(
                        "similarity", cfg.similarity_threshold)):
                continue  # the three-tier design: a preference or rule applies or not — no weak neighbours
            rec_bonus = self._recency(rec.updated_at, now)
            rec_part = cfg.rrf_recency * (rec_bonus / cfg.recency_bonus if cfg.recency_bonus
                                          else 0.0)
            scored.append((round(f.rrf + rec_part, 6), rec, f, rec_bonus, rec_part))
        scored.sort(key=lambda t: (-t[0], -t[1].id))
        out = []
        for sc, rec, f, rec_bonus, rec_part in scored[:limit]:
            sem = sims.get(f.id)
            out.append({**rec.to_wire(), "score": sc,
                        "lexical": round(lexical.get(f.id, 0.0), 6),
                        "semantic": None if sem is None else round(sem, 6),
                        "recency": round(rec_bonus, 6), "matched": f.matched,
                        "parts": {**f.to_wire(), "recency": round(rec_part, 6)}})
        return out

    # --- the three-tier design's lookup: exact id (flow) first, then similarity ---------------------------
    def _keyed(self, user_id: str, types: tuple[str, ...],
               kind: str | None) -> list[MemoryRecord]:
        """The in-memory records (preferences, rules, playbooks) of these layers."""
        recs: list[MemoryRecord] = []
        if "semantic" in types:
            recs += self.prefs.get(user_id, {}).values()
        if "procedural" in types:
            recs += self.rules.get(user_id, {}).values()
            recs += self.playbooks.get(user_id, [])
        return [r for r in recs if not kind or r.kind == kind]

    async def similar(self, user_id: str, types: tuple[str, ...], query: str,
                      kind: str | None = None) -> list[tuple[MemoryRecord, float]]:
        """Keyed records by cosine to ``query``, best first (empty with embeddings off)."""
        recs = self._keyed(user_id, types, kind)
        if not recs or not query.strip():
            return []
        qv = await self.embedder.embed([query])
        if qv is None:
            return []
        sims: dict[int, float] = {}
        for t in {r.type for r in recs}:
            m = await self._scope(user_id, t, int(qv.shape[1]))
            sims.update(m.similarities(qv[0], [r.id for r in recs if r.type == t]))
        scored = [(r, sims[r.id]) for r in recs if r.id in sims]
        scored.sort(key=lambda t: (-t[1], -t[0].updated_at))
        return scored

    async def _lookup(self, user_id: str, types: tuple[str, ...], flow: str, query: str,
                      limit: int, kind: str | None, threshold: Any) -> list[dict[str, Any]]:
        types = tuple(t for t in types if t in ("semantic", "procedural")) or ("procedural",)
        exact = [r for r in self._keyed(user_id, types, kind) if r.key == flow]
        exact.sort(key=lambda r: -r.updated_at)
        out = [{**r.to_wire(), "score": 1.0, "match": "flow", "matched": ["flow"]}
               for r in exact]
        if query.strip():
            th = _threshold(threshold, self.embedder.threshold(
                "similarity", self.config.memory.similarity_threshold))
            seen = {r.id for r in exact}
            for r, sim in await self.similar(user_id, types, query, kind):
                if sim >= th and r.id not in seen:
                    out.append({**r.to_wire(), "score": round(sim, 6), "semantic": round(sim, 6),
                                "match": "similarity", "matched": [VECTOR], "threshold": th})
        return out[:limit]

    async def bearing_on(self, s: Any, query: str) -> list[str]:
        """The preferences and rules of the session's user that bear on ``query`` (found as
        memory search finds them: hybrid, with the similarity floor for a match by meaning
        alone) and the playbook that matches it, as window lines, best first."""
        user = s.meta.user_id
        if not (self.prefs.get(user) or self.rules.get(user) or self.playbooks.get(user)):
            return []
        out: list[str] = []
        for type_ in ("semantic", "procedural"):
            for r in await self.search(user, type_, query, {"limit": 5}):
                if r.get("kind") in ("preference", "rule"):
                    out.append(f"- {r['kind']} {r.get('key') or ''}: {r.get('content', '')}")
        got = await self.playbook(user, query, {"write": False})
        pb = got.get("playbook")
        if pb:
            out.append(f"- playbook for '{pb.get('key') or ''}': {pb.get('content', '')}")
        return list(dict.fromkeys(out))

    async def playbook(self, user_id: str, query: str, opts: dict[str, Any],
                       client: str = "") -> dict[str, Any]:
        """The three-tier design: the playbook for this request — the newest playbook of ``opts.flow`` if
        there is one, else the one most similar to ``query`` at or above
        ``memory.playbook_threshold`` (``opts.threshold``). With ``opts.session_id`` it is
        written to that session's scratchpad (before the skill runs), unless ``opts.write``
        is false."""
        for k in opts:
            if k not in ("flow", "session_id", "threshold", "write"):
                raise invalid_params(f"opts.{k}", "unknown option; known: flow, session_id, "
                                     "threshold, write")
        flow = opts.get("flow")
        if flow is not None and not isinstance(flow, str):
            raise invalid_params("opts.flow", "expected the flow id (a string)")
        sid = opts.get("session_id")
        if sid is not None:
            if not isinstance(sid, str):
                raise invalid_params("opts.session_id", "expected a session id (a string)")
            s = self.sessions.get(sid)
            if s.meta.user_id != user_id:
                raise invalid_params("opts.session_id", f"session {sid!r} belongs to user "
                                     f"{s.meta.user_id!r}, not {user_id!r}")
        th = _threshold(opts.get("threshold"), self.embedder.threshold(
            "playbook", self.config.memory.playbook_threshold))
        if not query.strip() and not flow:
            raise invalid_params("query", "must not be empty (or pass opts.flow)")
        self.embedder.check_config()
        chosen: MemoryRecord | None = None
        match, sim = None, None
        if flow:
            books = sorted((b for b in self.playbooks.get(user_id, []) if b.key == flow),
                           key=lambda b: -b.updated_at)
            if books:
                chosen, match, sim = books[0], "flow", 1.0
        ranked = await self.similar(user_id, ("procedural",), query, "playbook")
        if chosen is None and ranked and ranked[0][1] >= th:
            chosen, match, sim = ranked[0][0], "similarity", ranked[0][1]
        snippet = None
        if chosen is not None and sid and opts.get("write", True) and not self.read_only:
            res = await self.scratchpad.write(sid, playbook_snippet(chosen), {
                "flow": chosen.key, "metadata": {"source": "playbook", "playbook_id": chosen.id,
                                                 "match": match}}, client)
            snippet = res["snippet"]
        return {"playbook": chosen.to_wire() if chosen else None, "match": match,
                "similarity": None if sim is None else round(sim, 6), "threshold": th,
                "mode": "hybrid" if self.embedder.enabled else "flow",
                "candidates": [{"id": r.id, "flow": r.key, "user_query":
                                r.metadata.get("user_query"), "similarity": round(s, 6)}
                               for r, s in ranked[:3]],
                "snippet": snippet}

    def _search_working(self, user_id: str, query: str, limit: int,
                        session_id: str | None) -> list[dict[str, Any]]:
        terms = [t for t in _WORD.findall(query.lower())]
        now = self.clock.now()
        out = []
        for sid in self._user_sessions(user_id):
            if session_id and sid != session_id:
                continue
            for sn in self.scratchpad.peek(sid):
                base = term_score(sn.text, terms)
                if base <= 0:
                    continue
                bonus = self._recency(sn.last_used_at, now)
                out.append({**sn.to_wire(), "type": "working", "score": round(base + bonus, 6),
                            "lexical": base, "semantic": None, "recency": round(bonus, 6)})
        out.sort(key=lambda d: (-d["score"], -d["id"]))
        return out[:limit]

    def _user_sessions(self, user_id: str) -> list[str]:
        return [sid for sid, s in self.sessions.by_id.items() if s.meta.user_id == user_id]

    # --- list / compact / stats / clear --------------------------------------------------
    async def list(self, user_id: str, type_: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Newest first; ``opts``: limit (50), before_id, kind, include_archived."""
        _check_type(type_, MEMORY_TYPES)
        limit = int(opts.get("limit") or 50)
        if type_ == "working":
            sns = [sn for sid in self._user_sessions(user_id)
                   for sn in self.scratchpad.peek(sid)]
            sns.sort(key=lambda s: -s.id)
            return [{**s.to_wire(), "type": "working"} for s in sns[:limit]]
        before = opts.get("before_id")
        found = await memory_rows.newest(self.store, user_id, type_, limit=limit,
                                  include_archived=bool(opts.get("include_archived")),
                                  kind=opts.get("kind") or None,
                                  before_id=int(before) if before is not None else None)
        return [MemoryRecord.from_row(r).to_wire() for r in found]

    def _compaction_summary(self, user_id: str, type_: str,
                            older: list[MemoryRecord]) -> MemoryRecord | None:
        """The record that stands for ``older`` episodic records once compacted (None for
        other types): one line each, with their plain metadata, linking their ids."""
        if type_ != "episodic":
            return None
        lines = [f"[Summary of {len(older)} entries]"]
        for r in older:
            meta = " ".join(f"{k}={v}" for k, v in r.metadata.items()
                            if isinstance(v, (str, int, float)))
            lines.append(f"- {r.content[:100]}" + (f" [{meta}]" if meta else ""))
        return self._new(user_id, type_, "summary", None, "\n".join(lines),
                         {"entry_ids": [r.id for r in older],
                          "start": older[0].created_at, "end": older[-1].created_at},
                         older[-1].created_at)

    async def compact(self, user_id: str, type_: str, opts: dict[str, Any],
                      client: str = "") -> dict[str, Any]:
        """The four-layer design's compact: keep the newest ``keep_last`` live, fold the older ones into one
        summary entry (``summarize_older``, default true). Older entries are archived behind
        the summary (``archived_by``), not deleted; working snippets are evicted (audited)."""
        _check_type(type_, MEMORY_TYPES)
        keep = opts.get("keep_last", self.config.memory.compact_keep_last)
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise invalid_params("opts.keep_last", "expected a whole number ≥ 0")
        summarize = bool(opts.get("summarize_older", True))
        if type_ == "semantic":
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(
                self.prefs.get(user_id, {}))}
        if type_ == "working":
            evicted = 0
            for sid in self._user_sessions(user_id):
                snips = self.scratchpad.peek(sid)
                for sn in snips[:max(0, len(snips) - keep)]:
                    await self.scratchpad.evict(sid, sn.id, client)
                    evicted += 1
            return {"type": type_, "archived": evicted, "summary_id": None, "kept": keep}
        recs = [MemoryRecord.from_row(r)
                for r in await memory_rows.live_oldest_first(self.store, user_id, type_)]
        older = recs[:max(0, len(recs) - keep)]
        if not older:
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(recs)}
        summary = self._compaction_summary(user_id, type_, older) if summarize else None
        mark = summary.id if summary else 0
        ops: list[Op] = [memory_rows.archive_op(r.id, mark) for r in older]
        vindex: Callable[[], None] = lambda: None  # noqa: E731
        if summary is not None:
            vops, vindex = await self._vector_ops([summary])
            ops += [summary.insert_op(), *vops]
        await self.store.write(ops)
        for r in older:
            self._unindex(r)
        self.vscopes.remove((user_id, type_), [r.id for r in older])
        vindex()
        if type_ == "episodic":
            self.episodic_count[user_id] = (self.episodic_count.get(user_id, 0) - len(older)
                                            + (1 if summary else 0))
        self._publish("compacted", user_id, type=type_, archived=len(older),
                      summary_id=summary.id if summary else None)
        return {"type": type_, "archived": len(older),
                "summary_id": summary.id if summary else None, "kept": len(recs) - len(older)}

    async def stats_for(self, user_id: str) -> dict[str, Any]:
        """The four-layer design's MemoryStats for one user (sizes in bytes, tokens by tiktoken)."""
        by_type, archived, vecs = await memory_rows.user_sizes(self.store, user_id)
        return self._stats_answer(
            user_id, episodic=by_type.get("episodic", (0, 0))[0],
            semantic=len(self.prefs.get(user_id, {})), rules=len(self.rules.get(user_id, {})),
            playbooks=len(self.playbooks.get(user_id, [])), archived=archived, vectors=vecs,
            stored_bytes=sum(b for _, b in by_type.values()))

    def _stats_answer(self, user_id: str, *, episodic: int, semantic: int, rules: int,
                      playbooks: int, archived: int, vectors: int,
                      stored_bytes: int) -> dict[str, Any]:
        """``stats_for``'s answer from the stored layers' counts and the working memory."""
        working = [sn for sid in self._user_sessions(user_id)
                   for sn in self.scratchpad.peek(sid)]
        return {
            "user_id": user_id,
            "working_memory_tokens": sum(self.tokens.count_text(sn.text, DEFAULT_MODEL)
                                         for sn in working),
            "working_snippets": len(working),
            "episodic_entry_count": episodic,
            "semantic_entry_count": semantic,
            "procedural_rule_count": rules,
            "playbook_count": playbooks,
            "archived_count": archived,
            "vector_count": vectors,
            "total_storage_bytes": stored_bytes + sum(len(sn.text.encode()) for sn in working),
            "search_mode": self.search_mode,
        }

    async def forget(self, user_id: str, record_id: int, client: str = "") -> dict[str, Any]:
        """Delete one stored record of ``user_id``, audited. A compaction summary that linked
        it drops the link and says so; forgetting a summary leaves its entries archived."""
        store = self.store
        row = await memory_rows.get(store, record_id, user_id)
        if row is None:
            raise MemmanError(NOT_FOUND, f"memory record {record_id} of user {user_id!r} not "
                              "found; memman_memory_search or memman_memory_list show the ids")
        rec = MemoryRecord.from_row(row)
        ops: list[Op] = memory_rows.delete_ops(rec.id)
        summary_id = rec.archived_by or None
        if summary_id:
            found = await memory_rows.get(store, summary_id)
            if found is not None:
                ops.append(memory_rows.rewrite_op(summary_id, *summary_without(
                    MemoryRecord.from_row(found), rec.id)))
            else:
                summary_id = None
        unlinked = 0
        if rec.kind == "summary":
            unlinked = await memory_rows.count_archived_by(store, rec.id)
            ops.append(memory_rows.unlink_summary_op(rec.id))
        arec, aop = self._forget_audit(rec, summary_id, unlinked, client)
        ops.append(aop)
        await store.write(ops)
        indexed = {"preference": self.prefs, "rule": self.rules}.get(rec.kind)
        if indexed is not None:
            if getattr(indexed.get(user_id, {}).get(rec.key or ""), "id", None) == rec.id:
                self._unindex(rec)
        elif rec.kind == "playbook":
            self._unindex(rec)
        elif rec.type == "episodic" and rec.archived_by is None:
            self.episodic_count[user_id] = max(0, self.episodic_count.get(user_id, 0) - 1)
        return self._forgotten(rec, summary_id, unlinked, arec.id, client)

    async def delete(self, record: MemoryRecord | None, extra: list[Op]) -> None:
        """Delete ``record`` (a promotion's new record, ``memman_undo``) with ``extra`` in
        the same transaction; with no record, commit ``extra`` alone."""
        ops: list[Op] = list(extra)
        if record is not None:
            ops = [*memory_rows.delete_ops(record.id), *extra]
        await self.store.write(ops)
        if record is not None:
            self._unindex(record)
            self._publish("deleted", record.user_id, record=record.to_wire())

    def _forget_audit(self, rec: MemoryRecord, summary_id: int | None, unlinked: int,
                      client: str) -> tuple[Any, Any]:
        """The audit record (and its operation) of forgetting ``rec``."""
        return self.audit.record(
            "forget", rec.content, f"memory:{rec.user_id}#{rec.id}", "-", client,
            user_id=rec.user_id, record=rec.to_wire(), summary_id=summary_id, unlinked=unlinked)

    def _forgotten(self, rec: MemoryRecord, summary_id: int | None, unlinked: int,
                   audit_id: int, client: str) -> dict[str, Any]:
        """After ``rec`` was forgotten: the answer, also published."""
        out = {"forgotten": rec.to_wire(), "summary_id": summary_id, "unlinked": unlinked,
               "audit_id": audit_id}
        self._publish("forgotten", rec.user_id, record_id=rec.id, client=client, **out)
        return out

    async def clear(self, user_id: str, type_: str, client: str = "") -> dict[str, Any]:
        """Delete one layer ("" = all) of a user's memory. The only call that deletes it."""
        types = clear_types(type_)
        cleared: dict[str, int] = {}
        if "working" in types:
            cleared["working"] = await self.scratchpad.clear(self._user_sessions(user_id),
                                                             client)
        stored = [t for t in types if t != "working"]
        if stored:
            counts = await memory_rows.counts_by_type(self.store, user_id, stored)
            _, aop = self._clear_audit(user_id, stored, counts, client)
            await self.store.write([*memory_rows.clear_ops(user_id, stored), aop])
            for t, n in counts:
                cleared[t] = n
            for t in stored:
                self.vscopes.scopes.pop((user_id, t), None)
            if "semantic" in stored:
                self.prefs.pop(user_id, None)
            if "procedural" in stored:
                self.rules.pop(user_id, None)
                self.playbooks.pop(user_id, None)
            if "episodic" in stored:
                self.episodic_count.pop(user_id, None)
        return self._cleared(user_id, types, cleared)

    def _clear_audit(self, user_id: str, stored: list[str], counts: list[tuple[str, int]],
                     client: str) -> tuple[Any, Any]:
        """The audit record (and its operation) of clearing these stored layers."""
        return self.audit.record("clear", f"user memory: {', '.join(stored)}",
                                 f"memory:{user_id}", "-", client, user_id=user_id,
                                 counts={t: n for t, n in counts})

    def _cleared(self, user_id: str, types: tuple[str, ...],
                 cleared: dict[str, int]) -> dict[str, Any]:
        """After a clear: the answer, also published."""
        self._publish("cleared", user_id, types=list(types), counts=cleared)
        return {"cleared": cleared}


def clear_types(type_: str) -> tuple[str, ...]:
    """The layers ``memman_memory_clear`` of ``type_`` deletes ("" or "all": every one)."""
    types = MEMORY_TYPES if type_ in ("", "all") else (type_,)
    for t in types:
        _check_type(t, MEMORY_TYPES)
    return types


def summary_without(sm: MemoryRecord, removed_id: int) -> tuple[str, dict[str, Any]]:
    """A compaction summary's content and metadata once the record ``removed_id`` it linked
    was forgotten: the link dropped, a note saying so (its text may still reflect it)."""
    meta = dict(sm.metadata)
    meta["entry_ids"] = [i for i in meta.get("entry_ids", []) if i != removed_id]
    meta["removed_entry_ids"] = [*meta.get("removed_entry_ids", []), removed_id]
    note = (f"\n[Entry {removed_id} was removed on request after this summary was "
            "written; the summary no longer links it and its text above may still "
            "reflect it.]")
    return sm.content + note, meta


def playbook_snippet(pb: MemoryRecord) -> str:
    """A playbook as one scratchpad snippet: the recipe the skill can follow or adapt."""
    m = pb.metadata
    calls = ", ".join(
        str(c.get("tool_id") or c.get("tool") or c.get("name") or c) if isinstance(c, dict)
        else str(c) for c in (m.get("tool_calls") or []))
    slots = ", ".join(f"{k}={v}" for k, v in (m.get("slots") or {}).items())
    parts = [f"Playbook for flow {pb.key}: a past request \"{m.get('user_query', '')}\""]
    if slots:
        parts.append(f"slots {slots}")
    if calls:
        parts.append(f"tool calls {calls}")
    if m.get("outcome"):
        parts.append(f"outcome: {m['outcome']}")
    return "; ".join(parts) + "."


def _threshold(value: Any, default: float) -> float:
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not -1 <= value <= 1:
        raise invalid_params("opts.threshold", "expected a cosine similarity from -1 to 1")
    return float(value)


def _check_type(type_: str, allowed: tuple[str, ...]) -> None:
    if type_ not in allowed:
        raise invalid_params("type", f"must be one of {', '.join(allowed)}; got {type_!r}")
