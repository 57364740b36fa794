"""The episodic layer: searchable past events, appended (a near-duplicate bumps the stored
one instead of storing a copy) and compacted (older entries archived behind one summary
entry, not deleted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from memman.errors import invalid_params
from memman_daemon.search.hybrid import may_be_duplicate
from memman_daemon.storage.memories import MemoryRecord
from memman_daemon.tiers.memory.core import Change, MemoryCore


class Episodic:
    """Episodic entries of every user; also what compaction does to any stored layer."""

    def __init__(self, core: MemoryCore) -> None:
        self.core = core
        self.duplicates = 0

    async def append(self, user_id: str, entry: dict[str, Any], content: str,
                     metadata: dict[str, Any]) -> dict[str, Any] | Change:
        """An entry as a change to commit, or (a near-duplicate) the answer of the bump."""
        core = self.core
        if not content:
            raise invalid_params("entry.content", "must not be empty")
        at = entry.get("timestamp")  # unix seconds or nil (the schema checked it)
        await core.rows.reserve_ids(1)
        rec = core.new(user_id, "episodic", "entry", None, content, metadata,
                       float(at) if at is not None else None)
        vec = await core.embedder.embed([core.vector_text(rec)])
        if vec is not None and entry.get("dedupe", core.config.memory.dedupe):
            dup = await self._near_duplicate(user_id, vec[0], content)
            if dup is not None:
                return await self._bump(dup[0], dup[1], rec)
        vops, vindex = await core.vector_ops([rec], vec)
        return Change(rec, [*core.rows.upsert(rec), *vops], vindex, "appended")

    async def _near_duplicate(self, user_id: str, vec: np.ndarray, text: str
                              ) -> tuple[MemoryRecord, float] | None:
        """The user's live episodic entry most similar to ``vec``, if at or above
        ``memory.duplicate_threshold`` and naming the same numbers and identifiers."""
        m = await self.core.scope(user_id, "episodic", int(vec.shape[0]))
        th = self.core.config.memory.duplicate_threshold
        close = [(i, s) for i, s in m.search(vec, 5) if s >= th]
        if not close:
            return None
        found = await self.core.rows.live([i for i, _ in close])
        for i, sim in close:
            rec = found.get(i)
            if rec is not None and rec.kind == "entry" and may_be_duplicate(rec.content, text):
                return rec, sim
        return None

    async def _bump(self, old: MemoryRecord, similarity: float,
                    new: MemoryRecord) -> dict[str, Any]:
        """A near-duplicate append: the stored entry's frequency goes up (it counts for
        promotion) and it is touched; no copy is stored."""
        core = self.core
        prev = old.copy()
        meta = dict(old.metadata)
        meta["frequency"] = int(meta.get("frequency", 1)) + 1
        meta["last_duplicate"] = new.content if new.content != old.content else None
        meta = {k: v for k, v in meta.items() if v is not None}
        at = core.clock.now()
        await core.storage.write([core.rows.touch(old.id, meta, at)])
        old.metadata, old.updated_at = meta, at
        self.duplicates += 1
        core.publish("updated", old.user_id, record=old.to_wire(), previous=prev.to_wire(),
                     duplicate=True, similarity=round(similarity, 6))
        return {"type": old.type, "record": old.to_wire(), "created": False,
                "duplicate_of": old.id, "similarity": round(similarity, 6),
                "frequency": meta["frequency"]}

    def _summary(self, user_id: str, type_: str,
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
        return self.core.new(user_id, type_, "summary", None, "\n".join(lines),
                             {"entry_ids": [r.id for r in older],
                              "start": older[0].created_at, "end": older[-1].created_at},
                             older[-1].created_at)

    async def compact(self, user_id: str, type_: str, keep: int,
                      summarize: bool) -> dict[str, Any]:
        """Keep the newest ``keep`` live records of a stored layer; archive the older ones
        behind one summary entry (episodic, ``summarize``) or none."""
        core = self.core
        if type_ == "semantic":
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(
                [k for k in await core.cache.user(user_id) if k[0] == "preference"])}
        await core.rows.reserve_ids(1)
        recs = await core.rows.oldest_live(user_id, type_)
        older = recs[:max(0, len(recs) - keep)]
        if not older:
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(recs)}
        summary = self._summary(user_id, type_, older) if summarize else None
        ops = core.rows.archive([r.id for r in older], summary.id if summary else 0)
        vindex: Callable[[], None] = lambda: None  # noqa: E731
        if summary is not None:
            vops, vindex = await core.vector_ops([summary])
            ops += [*core.rows.upsert(summary), *vops]
        await core.storage.write(ops)
        for r in older:
            core.cache.drop(r)
        core.vscopes.remove((user_id, type_), [r.id for r in older])
        vindex()
        core.publish("compacted", user_id, type=type_, archived=len(older),
                     summary_id=summary.id if summary else None)
        return {"type": type_, "archived": len(older),
                "summary_id": summary.id if summary else None, "kept": len(recs) - len(older)}
