"""Promotion from the scratchpad into user memory or agent.md (the three-tier design).

**Candidates.** Every snippet gets a score from the three-tier design's four criteria, each 0..1 and
weighted by ``[scratchpad]`` config (salience .35, surprisal .25, frequency .2, explicit .2):

- salience — a generalizable principle. The writer's own judgement (``opts.salience`` on
  write) when given, else a keyword heuristic (``always``, ``usually``, ``prefer``, ...).
- surprisal — an unexpected or poignant finding: the writer's value, else markers
  (``unexpected``, ``spike``, ``outlier``, ...).
- frequency — the same snippet written again: (frequency − 1) / ``frequency_saturation``.
- explicit — 1 when the user asked to save it (``opts.explicit``).

Each part comes back with its reason; snippets at or over ``promote_threshold`` are flagged.

**Promote.** Targets ``preference`` (opts.key, opts.value = the text), ``rule``
(opts.condition, opts.action = the text), ``playbook`` (opts.flow, slots, tool_calls, outcome,
user_query) and ``business`` (appended to the tenant's agent.md, opts.key optional). A
promotion that would overwrite a different existing value raises CONFLICT (-32002) with both
values unless ``opts.replace`` is true; promoting the same value again is no change. The
snippet is marked promoted and an audit record (what, from, to, client, when) is committed in
the same transaction as the memory change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memman.errors import CONFLICT, invalid_params
from memman_daemon.tiers.scratchpad import Snippet

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.events import EventBus
    from memman_daemon.sessions import Sessions
    from memman_daemon.storage import Storage
    from memman_daemon.tiers.agentmd import AgentMd
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tiers.memory import UserMemory
    from memman_daemon.tiers.scratchpad import Scratchpad


def _markers(text: str, markers: list[str]) -> list[str]:
    low = f" {text.lower()} "
    found = []
    for m in markers:
        m_low = m.lower()
        if m_low.isalnum() or " " in m_low:
            if f" {m_low} " in low or f" {m_low}," in low or f" {m_low}." in low:
                found.append(m)
        elif m_low in low:
            found.append(m)
    return found


def _judged(given: float | None, text: str, markers: list[str], base: float, unmarked: float,
            named: str, unnamed: str) -> dict[str, Any]:
    """A part of the score the writer may give (``given``), else judged from the markers
    found in ``text``: ``base`` and 0.2 more for each (at most 1), ``unmarked`` with none."""
    if given is not None:
        return {"value": given, "reason": "given by the writer"}
    found = _markers(text, markers)
    v = min(1.0, base + 0.2 * len(found)) if found else unmarked
    return {"value": round(v, 4), "reason": f"{named}: {', '.join(found)}" if found else unnamed}


def score_snippet(sn: Snippet, cfg: Any) -> dict[str, Any]:
    """The three-tier design's promotion score of one snippet, with a reason for each part."""
    parts: dict[str, dict[str, Any]] = {
        "salience": _judged(sn.salience, sn.text, cfg.salience_markers, 0.3, 0.1,
                            "generalizing words",
                            "no generalizing words; reads as a one-off observation"),
        "surprisal": _judged(sn.surprisal, sn.text, cfg.surprisal_markers, 0.4, 0.0,
                             "surprise markers", "nothing marked unexpected")}
    sat = max(1, cfg.frequency_saturation)
    fv = min(1.0, (sn.frequency - 1) / sat)
    parts["frequency"] = {"value": round(fv, 4), "reason": (
        f"written {sn.frequency} times" if sn.frequency > 1 else "written once")}
    parts["explicit"] = {"value": 1.0 if sn.explicit else 0.0, "reason": (
        "the user asked to save it" if sn.explicit else "no explicit request")}
    weights = {"salience": cfg.salience_weight, "surprisal": cfg.surprisal_weight,
               "frequency": cfg.frequency_weight, "explicit": cfg.explicit_weight}
    for k, p in parts.items():
        p["weight"] = weights[k]
    score = sum(p["value"] * p["weight"] for p in parts.values())
    return {"snippet_id": sn.id, "text": sn.text, "score": round(score, 4), "parts": parts,
            "candidate": score >= cfg.promote_threshold, "promoted": sn.promoted,
            "suggested_target": suggest_target(sn.text), "frequency": sn.frequency}


def suggest_target(text: str) -> str:
    low = text.lower()
    if low.startswith(("when ", "if ", "whenever ")) or " then " in low:
        return "rule"
    if any(w in low for w in ("prefers", "prefer ", "likes", "wants", "user's", "the user")):
        return "preference"
    return "business"


class Promotion:
    """Scores the scratchpad's snippets and promotes one into user memory or agent.md."""

    def __init__(self, config: Config, events: EventBus, sessions: Sessions,
                 scratchpad: Scratchpad, user_memory: UserMemory, agent_md: AgentMd, *,
                 audit: Recorder, storage: Storage) -> None:
        self.config = config
        self.events = events
        self.sessions = sessions
        self.scratchpad = scratchpad
        self.user_memory = user_memory
        self.agent_md = agent_md
        self.audit = audit  #: where shared-tier changes are audited
        self.storage = storage  #: commits the shared audit with the snippet's mark
        self.promoted = 0
        self.conflicts = 0

    def candidates(self, session_id: str) -> list[dict[str, Any]]:
        cfg = self.config.scratchpad
        out = [score_snippet(sn, cfg) for sn in self.scratchpad.pad(session_id).values()]
        out.sort(key=lambda c: (-c["score"], c["snippet_id"]))
        return out

    async def promote(self, session_id: str, snippet_id: int, target: str, opts: dict[str, Any],
                      client: str = "") -> dict[str, Any]:
        """Serialized with write / read / evict of the session's snippets: a snippet evicted
        first is not found (-32001); one evicted after is gone with its promotion recorded."""
        self.sessions.get(session_id)
        async with self.scratchpad.lock(session_id):
            return await self._promote(session_id, snippet_id, target, opts, client)

    async def _promote(self, session_id: str, snippet_id: int, target: str, opts: dict[str, Any],
                       client: str) -> dict[str, Any]:
        s = self.sessions.get(session_id)
        sn = self.scratchpad.get(session_id, snippet_id)
        user, tenant = s.meta.user_id, s.meta.tenant_id
        replace = bool(opts.get("replace", False))

        def text_opt(name: str, default: str | None) -> str:
            v = opts.get(name, default)
            if not isinstance(v, str) or not v:
                raise invalid_params(f"opts.{name}", f"promoting to {target} needs a non-empty "
                                     f"string '{name}'")
            return v

        try:
            if target == "business":
                key = opts.get("key")
                res = await self.agent_md.append(tenant, text_opt("text", sn.text), key=key,
                                                 replace=replace)
                ref = f"agent.md:{tenant}" + (f"#{key}" if key else "")
                changed, previous, change = res["changed"], res["previous"], None
            else:
                if target == "preference":
                    change = await self.user_memory.prepare_preference(
                        user, text_opt("key", None), text_opt("value", sn.text), replace=replace,
                        metadata={"promoted_from": f"scratchpad:{session_id}#{sn.id}"})
                    ref = f"preference:{change.record.key}"
                elif target == "rule":
                    change = await self.user_memory.prepare_rule(
                        user, text_opt("condition", None), text_opt("action", sn.text),
                        replace=replace,
                        metadata={"promoted_from": f"scratchpad:{session_id}#{sn.id}"})
                    ref = f"rule:{change.record.key}"
                else:
                    pb = {k: opts.get(k) for k in ("flow", "flow_dact", "slots", "tool_calls",
                                                   "outcome", "user_query")}
                    pb["outcome"] = pb["outcome"] or sn.text
                    change = await self.user_memory.prepare_playbook(user, pb, replace=replace)
                    ref = f"playbook:{change.record.key}#{change.record.id}"
                changed = change.changed
                previous = change.previous.content if change.previous else None
        except Exception as exc:
            if getattr(exc, "code", None) == CONFLICT:
                self.conflicts += 1
                self.events.publish("scratchpad", "conflict",
                                    {"snippet_id": sn.id, "target": target,
                                     "detail": getattr(exc, "data", None)},
                                    **self.sessions.scope(s))
            raise
        before = list(sn.promoted)
        rec, audit_op = self.audit.record(
            "promote", sn.text, f"scratchpad:{session_id}#{sn.id}", ref, client,
            session_id=session_id, user_id=user, tenant_id=tenant, changed=changed,
            replaced=previous, target_kind=target)
        sn.promoted.append({"target": target, "ref": ref, "at": rec.at, "audit_id": rec.id})
        extra = [self.scratchpad.op(sn), audit_op]
        try:
            if change is not None:
                await self.user_memory.commit(change, extra, client=client)
            else:
                await self.storage.write(extra)  # the shared audit first, then the snippet
        except Exception:
            sn.promoted[:] = before
            raise
        self.promoted += 1
        self.scratchpad.counters["promoted"] += 1
        self.events.publish("scratchpad", "promoted",
                            {"snippet_id": sn.id, "target": target, "ref": ref,
                             "changed": changed, "replaced": previous, "audit_id": rec.id},
                            **self.sessions.scope(s))
        return {"snippet": sn.to_wire(), "target": target, "ref": ref, "changed": changed,
                "replaced": previous, "audit_id": rec.id}
