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

import itertools
import json
import re
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman.errors import CONFLICT, NOT_FOUND, MemmanError, invalid_params
from memman_daemon.search import fts
from memman_daemon.search.hybrid import (
    BM25,
    VECTOR,
    content_words,
    may_be_duplicate,
    memory_vector_text,
    rrf,
)
from memman_daemon.search.vector_matrix import VectorScopes, blobs_to_matrix
from memman_daemon.search.vectors import VectorIndex
from memman_daemon.store import Op
from memman_daemon.tiers.scratchpad import normalize

if TYPE_CHECKING:
    from memman_daemon.app import App

MEMORY_TYPES = ("working", "episodic", "semantic", "procedural")
STORED_TYPES = ("episodic", "semantic", "procedural")
#: kinds found by meaning only above memory.similarity_threshold (the three-tier design's key types)
KEYED_KINDS = ("preference", "rule", "playbook")
_WORD = re.compile(r"\w+", re.UNICODE)


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

    _COLS = "id, user_id, type, kind, key, content, metadata, created_at, updated_at, archived_by"

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

    def insert_op(self) -> Op:
        return ("INSERT OR REPLACE INTO memories(id, user_id, type, kind, key, content, metadata, "
                "created_at, updated_at, archived_by) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (self.id, self.user_id, self.type, self.kind, self.key, self.content,
                 json.dumps(self.metadata, ensure_ascii=False, default=str), self.created_at,
                 self.updated_at, self.archived_by))


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


class UserMemory:
    stats_key = "memory"

    def __init__(self, app: App) -> None:
        self.app = app
        self.prefs: dict[str, dict[str, MemoryRecord]] = {}
        self.rules: dict[str, dict[str, MemoryRecord]] = {}
        self.playbooks: dict[str, list[MemoryRecord]] = {}
        self.episodic_count: dict[str, int] = {}
        self._ids = itertools.count(1)
        self.vectors = VectorIndex(app.config.database_path)
        #: (user_id, type) -> in-memory matrix of that layer's vectors (current model only)
        self.vscopes = VectorScopes(self._load_scope)
        self._backlog_scope: dict[int, tuple[str, str]] = {}
        self.searches = 0
        self.duplicates = 0

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        store = self.app.store
        self.prefs.clear()
        self.rules.clear()
        self.playbooks.clear()
        self.episodic_count.clear()
        rows = await store.fetchall(
            f"SELECT {MemoryRecord._COLS} FROM memories WHERE type IN ('semantic','procedural') "
            "AND archived_by IS NULL ORDER BY id")
        for r in rows:
            self._index(MemoryRecord.from_row(r))
        for uid, n in await store.fetchall(
                "SELECT user_id, count(*) FROM memories WHERE type='episodic' "
                "AND archived_by IS NULL GROUP BY user_id"):
            self.episodic_count[uid] = n
        top = await store.fetchall("SELECT max(id) FROM memories")
        self._ids = itertools.count((top[0][0] or 0) + 1)
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
        return "hybrid" if self.app.embedder.enabled else "fts"

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
        self.app.events.publish("memory", kind, data, user_id=user_id)

    # --- vectors -----------------------------------------------------------------------
    @staticmethod
    def vector_text(rec: MemoryRecord) -> str:
        return memory_vector_text(rec.kind, rec.key, rec.content, rec.metadata)

    async def _load_scope(self, key: Hashable) -> tuple[list[int], np.ndarray]:
        user_id, type_ = key  # type: ignore[misc]
        emb = self.app.embedder
        dim = self.vscopes.dim or 0
        rows = await self.app.store.fetchall(
            "SELECT v.id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.id "
            "WHERE m.user_id=? AND m.type=? AND m.archived_by IS NULL AND v.model=? AND v.dim=?",
            (user_id, type_, emb.model_id, dim))
        return [r[0] for r in rows], blobs_to_matrix([r[1] for r in rows], dim)

    async def _scope(self, user_id: str, type_: str, dim: int):  # -> VectorMatrix
        self.vscopes.dim = dim
        return await self.vscopes.get((user_id, type_), dim)

    async def _vector_ops(self, recs: list[MemoryRecord],
                          vecs: np.ndarray | None = None) -> tuple[list[Op], Callable[[], None]]:
        """Ops storing the records' vectors (embedded now unless given) and a callable that
        puts them in the in-memory index after commit. Without vectors (embeddings off or
        failing) the background worker fills them in later."""
        emb = self.app.embedder
        if not emb.enabled or not recs:
            return [], lambda: None
        if vecs is None:
            vecs = await emb.embed([self.vector_text(r) for r in recs])
        if vecs is None:
            self.app.vector_sync.request()
            return [], lambda: None
        model = emb.model_id
        ops: list[Op] = [("INSERT OR REPLACE INTO memory_vectors(id, dim, embedding, model) "
                          "VALUES (?,?,?,?)", (r.id, int(v.shape[0]), v.astype(np.float32).tobytes(),
                                               model)) for r, v in zip(recs, vecs, strict=True)]

        def index() -> None:
            if emb.model_id != model:
                return
            for r, v in zip(recs, vecs, strict=True):
                self.vscopes.add((r.user_id, r.type), [r.id], v[None, :])
        return ops, index

    async def count_vector_backlog(self, model_id: str) -> int:
        rows = await self.app.store.fetchall(
            "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.archived_by IS NULL AND (v.id IS NULL OR v.model <> ?)", (model_id,))
        return rows[0][0]

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        """Live records after id ``after`` with no vector of ``model_id``: ``(id, text)``."""
        rows = await self.app.store.fetchall(
            f"SELECT {_prefixed('m')} FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.id > ? AND m.archived_by IS NULL AND (v.id IS NULL OR v.model <> ?) "
            "ORDER BY m.id LIMIT ?", (after, model_id, limit))
        out = []
        for r in rows:
            rec = MemoryRecord.from_row(r)
            self._backlog_scope[rec.id] = (rec.user_id, rec.type)
            out.append((rec.id, self.vector_text(rec)))
        return out

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None:
        """Write vectors the background worker made (skipping rows deleted meanwhile)."""
        await self.app.store.write([
            ("INSERT OR REPLACE INTO memory_vectors(id, dim, embedding, model) "
             "SELECT ?,?,?,? WHERE EXISTS (SELECT 1 FROM memories WHERE id=?)",
             (i, int(v.shape[0]), v.astype(np.float32).tobytes(), model_id, i))
            for i, v in zip(ids, vecs, strict=True)])
        if self.app.embedder.model_id != model_id:
            return
        for i, v in zip(ids, vecs, strict=True):
            scope = self._backlog_scope.pop(i, None)
            if scope is not None:
                self.vscopes.add(scope, [i], v[None, :])

    def _new(self, user_id: str, type_: str, kind: str, key: str | None, content: str,
             metadata: dict[str, Any], at: float | None = None) -> MemoryRecord:
        now = self.app.clock.now()
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
            await self.app.store.write(ops)
        self._applied(change, edit[0].id if edit else None)

    def _edit_audit(self, change: Change, client: str) -> tuple[Any, Any] | None:
        """The audit record (and its operation) of an edit: a change replacing a value."""
        prev = change.previous
        if not change.changed or prev is None:
            return None
        rec = change.record
        return self.app.shared_audit.record(
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
        if not key:
            raise invalid_params("key", "must not be empty")
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
        ch = await self.prepare_preference(user_id, key, value, replace=bool(replace),
                                           metadata=meta)
        await self.commit(ch, client=client)
        return {"record": ch.record.to_wire(), "changed": ch.changed,
                "previous": ch.previous.content if ch.previous else None}

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
            s = self.app.sessions.get(sid)
            if s.meta.user_id != user_id:
                raise invalid_params("entry.session_id", f"session {sid!r} belongs to user "
                                     f"{s.meta.user_id!r}, not {user_id!r}")
            res = await self.app.scratchpad.write(sid, content, {"metadata": metadata}, client)
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
            vec = await self.app.embedder.embed([self.vector_text(rec)])
            if vec is not None and entry.get("dedupe", self.app.config.memory.dedupe):
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
        th = self.app.config.memory.duplicate_threshold
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
        old.updated_at = self.app.clock.now()
        await self.app.store.write([("UPDATE memories SET metadata=?, updated_at=? WHERE id=?",
                                      (json.dumps(old.metadata, ensure_ascii=False, default=str),
                                       old.updated_at, old.id))])
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
        self.app.embedder.check_config()
        limit = int(opts.get("limit") or self.app.config.memory.search_limit)
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
        if not self.app.embedder.enabled:
            return "fts"
        return mode or "hybrid"

    def _recency(self, at: float, now: float) -> float:
        cfg = self.app.config.memory
        age = max(0.0, now - at)
        if age >= cfg.recency_window_s:
            return 0.0
        return cfg.recency_bonus * (1.0 - age / cfg.recency_window_s)

    async def _bm25(self, user_id: str, types: tuple[str, ...], query: str, limit: int,
                    kind: str | None, content_only: bool = False
                    ) -> tuple[dict[int, float], dict[int, MemoryRecord]]:
        """FTS5 candidates: ``({id: bm25 (higher is better)}, {id: record})``, best first.
        ``content_only``: stop words left out of the query (the hybrid half)."""
        cfg = self.app.config.memory
        store = self.app.store
        filt, fparams = _filter(user_id, types, kind)
        lexical: dict[int, float] = {}
        rows: dict[int, MemoryRecord] = {}
        total = (sum(self.episodic_count.values()) + sum(len(v) for v in self.prefs.values())
                 + sum(len(v) for v in self.rules.values())
                 + sum(len(v) for v in self.playbooks.values()))
        words = fts.words(query)
        if content_only:
            words = content_words(words)
        match = fts.match_expr(await fts.informative(store, "memories_fts", words, total))
        if match:
            # BM25 over every match is what makes a query of very common words slow. When
            # the words match more than memory.max_scan entries (words that common carry
            # little information), only the newest max_scan matches are ranked — unless
            # that leaves this user fewer than `limit` results, then all are.
            # in a hybrid search the vectors carry the meaning, so BM25 needs fewer rows
            scan = cfg.hybrid_max_scan if content_only else cfg.max_scan
            bound = await store.fetchall(
                "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? "
                "ORDER BY rowid DESC LIMIT 1 OFFSET ?", (match, scan))
            low = bound[0][0] if bound else 0
            sql = (f"SELECT {_prefixed('m')}, bm25(memories_fts) AS r "
                   f"FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
                   f"WHERE memories_fts MATCH ? AND memories_fts.rowid >= ? AND {filt} "
                   f"ORDER BY r LIMIT ?")
            found = await store.fetchall(sql, [match, low, *fparams, cfg.candidates])
            if low and len(found) < limit:
                found = await store.fetchall(sql, [match, 0, *fparams, cfg.candidates])
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
        rows = await self.app.store.fetchall(
            f"SELECT {MemoryRecord._COLS} FROM memories WHERE archived_by IS NULL AND id IN "
            f"({','.join('?' * len(ids))})", ids)
        return {r[0]: MemoryRecord.from_row(r) for r in rows}

    async def _search_stored(self, user_id: str, types: tuple[str, ...], query: str,
                             limit: int, kind: str | None,
                             mode: str = "hybrid") -> list[dict[str, Any]]:
        cfg = self.app.config.memory
        now = self.app.clock.now()
        lexical: dict[int, float] = {}
        rows: dict[int, MemoryRecord] = {}
        if mode != "vector":
            lexical, rows = await self._bm25(user_id, types, query, limit, kind,
                                             content_only=mode == "hybrid")
        qv = await self.app.embedder.embed([query]) if mode != "fts" else None
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
                    and sims.get(f.id, 0.0) < self.app.embedder.threshold(
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
        qv = await self.app.embedder.embed([query])
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
            th = _threshold(threshold, self.app.embedder.threshold(
                "similarity", self.app.config.memory.similarity_threshold))
            seen = {r.id for r in exact}
            for r, sim in await self.similar(user_id, types, query, kind):
                if sim >= th and r.id not in seen:
                    out.append({**r.to_wire(), "score": round(sim, 6), "semantic": round(sim, 6),
                                "match": "similarity", "matched": [VECTOR], "threshold": th})
        return out[:limit]

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
            s = self.app.sessions.get(sid)
            if s.meta.user_id != user_id:
                raise invalid_params("opts.session_id", f"session {sid!r} belongs to user "
                                     f"{s.meta.user_id!r}, not {user_id!r}")
        th = _threshold(opts.get("threshold"), self.app.embedder.threshold(
            "playbook", self.app.config.memory.playbook_threshold))
        if not query.strip() and not flow:
            raise invalid_params("query", "must not be empty (or pass opts.flow)")
        self.app.embedder.check_config()
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
        if chosen is not None and sid and opts.get("write", True) and not self.app.read_only:
            res = await self.app.scratchpad.write(sid, playbook_snippet(chosen), {
                "flow": chosen.key, "metadata": {"source": "playbook", "playbook_id": chosen.id,
                                                 "match": match}}, client)
            snippet = res["snippet"]
        return {"playbook": chosen.to_wire() if chosen else None, "match": match,
                "similarity": None if sim is None else round(sim, 6), "threshold": th,
                "mode": "hybrid" if self.app.embedder.enabled else "flow",
                "candidates": [{"id": r.id, "flow": r.key, "user_query":
                                r.metadata.get("user_query"), "similarity": round(s, 6)}
                               for r, s in ranked[:3]],
                "snippet": snippet}

    def _search_working(self, user_id: str, query: str, limit: int,
                        session_id: str | None) -> list[dict[str, Any]]:
        terms = [t for t in _WORD.findall(query.lower())]
        now = self.app.clock.now()
        out = []
        for sid in self._user_sessions(user_id):
            if session_id and sid != session_id:
                continue
            for sn in self.app.scratchpad.peek(sid):
                base = term_score(sn.text, terms)
                if base <= 0:
                    continue
                bonus = self._recency(sn.last_used_at, now)
                out.append({**sn.to_wire(), "type": "working", "score": round(base + bonus, 6),
                            "lexical": base, "semantic": None, "recency": round(bonus, 6)})
        out.sort(key=lambda d: (-d["score"], -d["id"]))
        return out[:limit]

    def _user_sessions(self, user_id: str) -> list[str]:
        return [sid for sid, s in self.app.sessions.by_id.items() if s.meta.user_id == user_id]

    # --- list / compact / stats / clear --------------------------------------------------
    async def list(self, user_id: str, type_: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Newest first; ``opts``: limit (50), before_id, kind, include_archived."""
        _check_type(type_, MEMORY_TYPES)
        limit = int(opts.get("limit") or 50)
        if type_ == "working":
            sns = [sn for sid in self._user_sessions(user_id)
                   for sn in self.app.scratchpad.peek(sid)]
            sns.sort(key=lambda s: -s.id)
            return [{**s.to_wire(), "type": "working"} for s in sns[:limit]]
        where = "user_id=? AND type=?"
        params: list[Any] = [user_id, type_]
        if not opts.get("include_archived"):
            where += " AND archived_by IS NULL"
        if opts.get("kind"):
            where += " AND kind=?"
            params.append(opts["kind"])
        if opts.get("before_id") is not None:
            where += " AND id<?"
            params.append(int(opts["before_id"]))
        rows = await self.app.store.fetchall(
            f"SELECT {MemoryRecord._COLS} FROM memories WHERE {where} ORDER BY id DESC LIMIT ?",
            [*params, limit])
        return [MemoryRecord.from_row(r).to_wire() for r in rows]

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
        keep = opts.get("keep_last", self.app.config.memory.compact_keep_last)
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise invalid_params("opts.keep_last", "expected a whole number ≥ 0")
        summarize = bool(opts.get("summarize_older", True))
        if type_ == "semantic":
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(
                self.prefs.get(user_id, {}))}
        if type_ == "working":
            evicted = 0
            for sid in self._user_sessions(user_id):
                snips = self.app.scratchpad.peek(sid)
                for sn in snips[:max(0, len(snips) - keep)]:
                    await self.app.scratchpad.evict(sid, sn.id, client)
                    evicted += 1
            return {"type": type_, "archived": evicted, "summary_id": None, "kept": keep}
        rows = await self.app.store.fetchall(
            f"SELECT {MemoryRecord._COLS} FROM memories WHERE user_id=? AND type=? "
            "AND archived_by IS NULL ORDER BY created_at, id", (user_id, type_))
        recs = [MemoryRecord.from_row(r) for r in rows]
        older = recs[:max(0, len(recs) - keep)]
        if not older:
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(recs)}
        summary = self._compaction_summary(user_id, type_, older) if summarize else None
        mark = summary.id if summary else 0
        ops: list[Op] = [("UPDATE memories SET archived_by=? WHERE id=?", (mark, r.id))
                         for r in older]
        vindex: Callable[[], None] = lambda: None  # noqa: E731
        if summary is not None:
            vops, vindex = await self._vector_ops([summary])
            ops += [summary.insert_op(), *vops]
        await self.app.store.write(ops)
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
        model = "gpt-4o-mini"
        working = [sn for sid in self._user_sessions(user_id)
                   for sn in self.app.scratchpad.peek(sid)]
        rows = await self.app.store.fetchall(
            "SELECT type, count(*), sum(length(content) + length(metadata) + length(coalesce(key,''))) "
            "FROM memories WHERE user_id=? AND archived_by IS NULL GROUP BY type", (user_id,))
        by_type = {r[0]: (r[1], r[2] or 0) for r in rows}
        archived = await self.app.store.fetchall(
            "SELECT count(*) FROM memories WHERE user_id=? AND archived_by IS NOT NULL", (user_id,))
        vecs = await self.app.store.fetchall(
            "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id=v.id WHERE m.user_id=?",
            (user_id,))
        return {
            "user_id": user_id,
            "working_memory_tokens": sum(self.app.tokens.count_text(sn.text, model)
                                         for sn in working),
            "working_snippets": len(working),
            "episodic_entry_count": by_type.get("episodic", (0, 0))[0],
            "semantic_entry_count": len(self.prefs.get(user_id, {})),
            "procedural_rule_count": len(self.rules.get(user_id, {})),
            "playbook_count": len(self.playbooks.get(user_id, [])),
            "archived_count": archived[0][0],
            "vector_count": vecs[0][0],
            "total_storage_bytes": sum(b for _, b in by_type.values())
            + sum(len(sn.text.encode()) for sn in working),
            "search_mode": self.search_mode,
        }

    async def forget(self, user_id: str, record_id: int, client: str = "") -> dict[str, Any]:
        """Delete one stored record of ``user_id``, audited. A compaction summary that linked
        it drops the link and says so; forgetting a summary leaves its entries archived."""
        store = self.app.store
        rows = await store.fetchall(f"SELECT {MemoryRecord._COLS} FROM memories "
                                    "WHERE id=? AND user_id=?", (record_id, user_id))
        if not rows:
            raise MemmanError(NOT_FOUND, f"memory record {record_id} of user {user_id!r} not "
                              "found; memman_memory_search or memman_memory_list show the ids")
        rec = MemoryRecord.from_row(rows[0])
        ops: list[Op] = [("DELETE FROM memory_vectors WHERE id=?", (rec.id,)),
                         ("DELETE FROM memories WHERE id=?", (rec.id,))]
        summary_id = rec.archived_by or None
        if summary_id:
            found = await store.fetchall(f"SELECT {MemoryRecord._COLS} FROM memories "
                                         "WHERE id=?", (summary_id,))
            if found:
                sm = MemoryRecord.from_row(found[0])
                meta = dict(sm.metadata)
                meta["entry_ids"] = [i for i in meta.get("entry_ids", []) if i != rec.id]
                meta["removed_entry_ids"] = [*meta.get("removed_entry_ids", []), rec.id]
                note = (f"\n[Entry {rec.id} was removed on request after this summary was "
                        "written; the summary no longer links it and its text above may still "
                        "reflect it.]")
                ops.append(("UPDATE memories SET content=?, metadata=? WHERE id=?",
                            (sm.content + note, json.dumps(meta, ensure_ascii=False,
                                                           default=str), sm.id)))
            else:
                summary_id = None
        unlinked = 0
        if rec.kind == "summary":
            n = await store.fetchall("SELECT count(*) FROM memories WHERE archived_by=?",
                                     (rec.id,))
            unlinked = n[0][0]
            ops.append(("UPDATE memories SET archived_by=0 WHERE archived_by=?", (rec.id,)))
        arec, aop = self.app.shared_audit.record(
            "forget", rec.content, f"memory:{user_id}#{rec.id}", "-", client, user_id=user_id,
            record=rec.to_wire(), summary_id=summary_id, unlinked=unlinked)
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
        out = {"forgotten": rec.to_wire(), "summary_id": summary_id, "unlinked": unlinked,
               "audit_id": arec.id}
        self._publish("forgotten", user_id, record_id=rec.id, client=client, **out)
        return out

    async def clear(self, user_id: str, type_: str, client: str = "") -> dict[str, Any]:
        """Delete one layer ("" = all) of a user's memory. The only call that deletes it."""
        types = MEMORY_TYPES if type_ in ("", "all") else (type_,)
        for t in types:
            _check_type(t, MEMORY_TYPES)
        cleared: dict[str, int] = {}
        if "working" in types:
            cleared["working"] = await self.app.scratchpad.clear(self._user_sessions(user_id),
                                                                  client)
        stored = [t for t in types if t != "working"]
        if stored:
            marks = ",".join("?" * len(stored))
            counts = await self.app.store.fetchall(
                f"SELECT type, count(*) FROM memories WHERE user_id=? AND type IN ({marks}) "
                "GROUP BY type", [user_id, *stored])
            _, aop = self.app.shared_audit.record("clear", f"user memory: {', '.join(stored)}",
                                            f"memory:{user_id}", "-", client, user_id=user_id,
                                            counts={t: n for t, n in counts})
            await self.app.store.write([
                (f"DELETE FROM memory_vectors WHERE id IN (SELECT id FROM memories WHERE "
                 f"user_id=? AND type IN ({marks}))", [user_id, *stored]),
                (f"DELETE FROM memories WHERE user_id=? AND type IN ({marks})", [user_id, *stored]),
                aop])
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
        self._publish("cleared", user_id, types=list(types), counts=cleared)
        return {"cleared": cleared}


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


def _filter(user_id: str, types: tuple[str, ...], kind: str | None) -> tuple[str, list[Any]]:
    marks = ",".join("?" * len(types))
    filt = f"m.user_id=? AND m.type IN ({marks}) AND m.archived_by IS NULL"
    params: list[Any] = [user_id, *types]
    if kind:
        filt += " AND m.kind=?"
        params.append(kind)
    return filt, params


def _prefixed(alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in MemoryRecord._COLS.split(","))


def _check_type(type_: str, allowed: tuple[str, ...]) -> None:
    if type_ not in allowed:
        raise invalid_params("type", f"must be one of {', '.join(allowed)}; got {type_!r}")
