"""The semantic and procedural layers: records kept one per key -- preferences (key -> value,
the four-layer design's learn / recall), rules (condition -> action) and playbooks (the
three-tier design: flow, slots, tool_calls, outcome, user_query; one per flow and query).

All three are one "upsert by key" (``Keyed.upsert``): the same value is no change, a different
one is a CONFLICT unless the caller asked to replace it, and the database decides between two
writers of one key at once (``MemoryCore.commit``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memman.errors import CONFLICT, MemmanError, invalid_params
from memman.params import MAX_ID_BYTES
from memman_daemon.storage.memories import MemoryRecord
from memman_daemon.tiers.memory.core import Change, MemoryCore


@dataclass(frozen=True)
class KeyedKind:
    """How one kind of keyed record is stored, compared and refused."""

    type: str  #: its layer
    event: str  #: the memory event of a change
    #: is (content, metadata) what ``old`` already holds?
    same: Callable[[MemoryRecord, str, dict[str, Any]], bool]
    #: the CONFLICT message: (user, key, old, new content)
    says: Callable[[str, str, MemoryRecord, str], str]
    #: the CONFLICT's data: (key, old, new content, new metadata)
    data: Callable[[str, MemoryRecord, str, dict[str, Any]], dict[str, Any]]

    def conflict(self, user_id: str, key: str, old: MemoryRecord, content: str,
                 meta: dict[str, Any]) -> MemmanError:
        return MemmanError(CONFLICT, self.says(user_id, key, old, content),
                           self.data(key, old, content, meta))


_REPLACE = "Pass replace=true to overwrite it, or keep the existing one"
KINDS = {
    "preference": KeyedKind(
        "semantic", "learned", lambda old, c, m: old.content == c,
        lambda u, k, old, c: f"preference {k!r} of user {u!r} is already {old.content!r}; "
                             f"the new value {c!r} differs. {_REPLACE}",
        lambda k, old, c, m: {"key": k, "existing": old.content, "proposed": c}),
    "rule": KeyedKind(
        "procedural", "appended", lambda old, c, m: old.content == c,
        lambda u, k, old, c: f"rule for condition {k!r} already says {old.content!r}; the "
                             f"new action {c!r} differs. {_REPLACE}",
        lambda k, old, c, m: {"condition": k, "existing": old.content, "proposed": c}),
    "playbook": KeyedKind(
        "procedural", "appended", lambda old, c, m: old.metadata == m,
        lambda u, k, old, c: f"a playbook for flow {k!r} and this query already exists with "
                             f"outcome {old.metadata.get('outcome')!r}; pass replace=true to "
                             "overwrite it",
        lambda k, old, c, m: {"flow": k, "existing": old.metadata, "proposed": m}),
}


class Keyed:
    """Preferences, rules and playbooks of every user."""

    def __init__(self, core: MemoryCore) -> None:
        self.core = core

    async def upsert(self, user_id: str, kind: str, key: str, content: str,
                     metadata: dict[str, Any], *, replace: bool) -> Change:
        """Set the record of ``kind`` and ``key`` (a playbook's key is its flow and query) to
        ``content``: the change, with the value it replaces as ``previous``."""
        spec, core = KINDS[kind], self.core
        await core.rows.reserve_ids(2)  # the record and, for an edit or a promotion, its audit
        old = await core.cache.key(user_id, kind, key, metadata)
        if old is not None and spec.same(old, content, metadata):
            return Change(old, [], lambda: None, spec.event, changed=False)
        if old is not None and not replace:
            raise spec.conflict(user_id, key, old, content, metadata)
        rec = core.new(user_id, spec.type, kind, key, content, metadata)
        if old is not None:
            rec.id, rec.created_at = old.id, old.created_at
        vops, vindex = await core.vector_ops([rec])

        def apply() -> None:
            core.cache.put(rec)
            vindex()
        return Change(rec, [*core.rows.upsert(rec), *vops], apply, spec.event, previous=old)

    async def prepare_preference(self, user_id: str, key: str, value: str, *, replace: bool,
                                 metadata: dict[str, Any] | None = None) -> Change:
        """Set ``key`` to ``value``. A different existing value is a CONFLICT unless
        ``replace``; the same value is no change."""
        if not key or "\x00" in key or len(key.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
            raise invalid_params("key", f"a key is 1 to {MAX_ID_BYTES} bytes with no NUL")
        return await self.upsert(user_id, "preference", key, value, metadata or {},
                                 replace=replace)

    async def prepare_rule(self, user_id: str, condition: str, action: str, *, replace: bool,
                           metadata: dict[str, Any] | None = None) -> Change:
        if not condition:
            raise invalid_params("condition", "must not be empty")
        return await self.upsert(user_id, "rule", condition, action, metadata or {},
                                 replace=replace)

    async def prepare_playbook(self, user_id: str, pb: dict[str, Any], *,
                               replace: bool) -> Change:
        flow = pb.get("flow") or pb.get("flow_dact")
        if not isinstance(flow, str) or not flow:
            raise invalid_params("playbook.flow", "expected the flow id (the three-tier "
                                 "design's flow_dact)")
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
        return await self.upsert(user_id, "playbook", flow, f"{user_query}\n{outcome}".strip(),
                                 meta, replace=replace)

    async def learn(self, user_id: str, key: str, value: Any, opts: dict[str, Any],
                    client: str = "") -> dict[str, Any]:
        """The four-layer design's learn: set a preference, overwriting by default
        (``opts.replace`` false makes a different existing value a CONFLICT). Non-text values
        are stored as JSON and recalled as they were given."""
        replace = opts.get("replace", True)
        meta = dict(opts.get("metadata") or {})
        if not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
            meta["json"] = True

        async def once() -> dict[str, Any]:
            ch = await self.prepare_preference(user_id, key, value, replace=bool(replace),
                                               metadata=meta)
            await self.core.commit(ch, client=client)
            return {"record": ch.record.to_wire(), "changed": ch.changed,
                    "previous": ch.previous.content if ch.previous else None}
        return await self.core.decided(once)

    async def recall(self, user_id: str, key: str) -> dict[str, Any] | None:
        rec = await self.core.cache.key(user_id, "preference", key)
        if rec is None:
            return None
        value = json.loads(rec.content) if rec.metadata.get("json") else rec.content
        return {"key": key, "value": value, "timestamp": rec.updated_at,
                "created_at": rec.created_at, "id": rec.id, "metadata": rec.metadata}
