"""``memman_undo``: reverse the caller's last pin, unpin, eviction or promotion.

Undo reads the audit log, which records every one of those actions with what is needed to
reverse it (the entry id and its previous pin state; the evicted snippet or cache entry in full;
the promotion's target and the value it replaced). It picks the newest such record of the
calling client (``opts.client`` to name another, ``opts.session_id`` to narrow it,
``opts.audit_id`` for one record) that no earlier undo reversed, applies the inverse, and writes
an ``undo`` record naming the one it reversed — in the same transaction where the tier allows.
Undoing again walks further back. Automatic evictions (LRU, capacity, expiry, a deleted
session) are not the client's actions and are never undone.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from memman import names
from memman.errors import CONFLICT, MemmanError, invalid_params, not_found
from memman_daemon.params import ROW_ID, Bool, Id, Map, Nullable, Str
from memman_daemon.rpc import Call, Param, method
from memman_daemon.store import Op

UNDOABLE = ("pin", "unpin", "evict", "promote")
_OPTS = {"client", "session_id", "audit_id", "dry_run"}
_SCAN = 500  #: audit records looked at for the newest undoable one


async def _candidates(call: Call, client: str, session_id: str | None) -> list[tuple[Any, ...]]:
    where = ["client=?", f"action IN ({','.join('?' * len(UNDOABLE))})"]
    params: list[Any] = [client, *UNDOABLE]
    if session_id is not None:
        where.append("session_id=?")
        params.append(session_id)
    return await call.core.store.fetchall(
        "SELECT id, at, action, what, source, target, client, session_id, user_id, tenant_id, "
        f"data FROM audit WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT {_SCAN}", params)


async def _undone(call: Call) -> set[int]:
    rows = await call.core.store.fetchall("SELECT data FROM audit WHERE action='undo'")
    out: set[int] = set()
    for (data,) in rows:
        with_id = json.loads(data).get("undone")
        if isinstance(with_id, int):
            out.add(with_id)
    return out


def _undoable(action: str, data: dict[str, Any]) -> bool:
    if action == "evict":
        return data.get("reason") == "explicit" and ("snippet" in data or "entry" in data)
    return True


@method(names.UNDO, Param("opts", Map({
    "client": Str(min_len=1, max_bytes=512), "session_id": Nullable(Id()),
    "audit_id": Nullable(ROW_ID), "dry_run": Bool()}), default=dict), writes=True)
async def undo(call: Call, opts: dict[str, Any]) -> dict[str, Any]:
    """Reverse the newest pin / unpin / evict / promote of this client (see the module doc).
    Returns ``{undone: <the audit record>, audit_id, result}``; -32001 when nothing is left."""
    for k in opts:
        if k not in _OPTS:
            raise invalid_params(f"opts.{k}", f"unknown option; known: {', '.join(sorted(_OPTS))}")
    client = opts.get("client", call.client_name)
    if not isinstance(client, str) or not client:
        raise invalid_params("opts.client", "expected a client name")
    session_id = opts.get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise invalid_params("opts.session_id", "expected a string")
    audit_id = opts.get("audit_id")
    if audit_id is not None and (not isinstance(audit_id, int) or isinstance(audit_id, bool)):
        raise invalid_params("opts.audit_id", "expected an integer (an audit record id)")
    dry_run = opts.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise invalid_params("opts.dry_run", "expected a boolean")
    done = await _undone(call)
    rec: dict[str, Any] | None = None
    for row in await _candidates(call, client, session_id):
        data = json.loads(row[10])
        if row[0] in done or not _undoable(row[2], data):
            continue
        if audit_id is not None and row[0] != audit_id:
            continue
        rec = dict(zip(("id", "at", "action", "what", "source", "target", "client",
                        "session_id", "user_id", "tenant_id"), row[:10], strict=True))
        rec["data"] = data
        break
    shared = getattr(call.core.shared_audit, "newest_promotion", None)
    if shared is not None and audit_id is None:  # promotions are audited in the shared store
        newer = await shared(client, session_id, rec["at"] if rec else None)
        if newer is not None:
            raise MemmanError(CONFLICT, f"the newest undoable action of client {client!r} is "
                              f"the promotion to {newer['target']!r} (shared audit "
                              f"#{newer['id']}); undo does not reverse promotions made in the "
                              "shared store yet: reverse it with memman_memory_learn or "
                              "memman_memory_forget (older actions are not undone instead)",
                              {"promotion": newer})
    if rec is None:
        raise not_found("undoable action", audit_id if audit_id is not None else
                        f"of client {client!r}" + (f" in session {session_id!r}"
                                                   if session_id else ""))
    if dry_run:
        return {"undone": rec, "audit_id": None, "result": None, "dry_run": True}
    urec, uop = call.core.audit.record(
        "undo", rec["what"], f"audit#{rec['id']}", rec["source"], call.client_name,
        session_id=rec["session_id"], user_id=rec["user_id"], tenant_id=rec["tenant_id"],
        undone=rec["id"], undone_action=rec["action"])
    action = rec["action"]
    if action in ("pin", "unpin"):
        result = await _unpin(call, rec, uop)
    elif action == "evict" and "snippet" in rec["data"]:
        result = await _restore_snippet(call, rec, uop)
    elif action == "evict":
        result = await _restore_cache(call, rec, uop)
    else:
        result = await _unpromote(call, rec, uop)
    return {"undone": rec, "audit_id": urec.id, "result": result}


async def _unpin(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    s = call.core.sessions.get(rec["session_id"])
    entry_id = int(rec["data"]["entry_id"])
    previous = bool(rec["data"].get("previous"))
    out = await call.core.engine.pin(s, entry_id, previous)
    await call.core.store.write([uop])
    return out


async def _restore_snippet(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    from memman_daemon.tiers.scratchpad import Snippet

    core = call.core
    sid = rec["session_id"]
    core.sessions.get(sid)
    sn = Snippet.from_wire(rec["data"]["snippet"])
    pad = core.scratchpad.pad(sid)
    if sn.id in pad:
        raise MemmanError(CONFLICT, f"snippet {sn.id} is in the scratchpad already")
    if len(pad) >= core.config.scratchpad.max_snippets:
        raise MemmanError(CONFLICT, f"the scratchpad of {sid!r} is full "
                          f"({core.config.scratchpad.max_snippets} snippets); evict one first")
    pad[sn.id] = sn  # back as the most recently used
    try:
        await core.store.write([core.scratchpad.op(sn), uop])
    except Exception:
        pad.pop(sn.id, None)
        raise
    core.scratchpad._publish("written", sid, snippet=sn.to_wire(), count=len(pad), restored=True)
    return {"snippet": sn.to_wire()}


async def _restore_cache(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    from memman_daemon.tiers.cache import CacheEntry

    core = call.core
    sid = rec["session_id"]
    core.sessions.get(sid)
    e = CacheEntry.from_wire(rec["data"]["entry"])
    bucket = core.cache.by_session.setdefault(sid, {})
    if e.key in bucket:
        raise MemmanError(CONFLICT, f"cache entry {e.key} is cached again already")
    bucket[e.key] = e
    try:
        await core.store.write([core.cache.put_op(e), uop])
    except Exception:
        bucket.pop(e.key, None)
        raise
    core.cache._publish("put", sid, entry=e.to_wire(), restored=True)
    return {"entry": e.to_wire()}


async def _unpromote(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    """Put the target back as it was (the replaced value, or no record), and unmark the
    snippet when it is still in the scratchpad."""
    core = call.core
    data = rec["data"]
    kind = data.get("target_kind") or rec["target"].split(":", 1)[0]
    ref: str = rec["target"]
    previous = data.get("replaced")
    user, tenant = rec["user_id"], rec["tenant_id"]
    extra: list[Op] = [uop]
    sn = None
    sid = rec["session_id"]
    if sid and sid in core.scratchpad.by_session:
        snippet_id = int(rec["source"].rsplit("#", 1)[-1])
        sn = core.scratchpad.by_session[sid].get(snippet_id)
        if sn is not None:
            kept = [p for p in sn.promoted if p.get("audit_id") != rec["id"]]
            if len(kept) != len(sn.promoted):
                sn.promoted[:] = kept
                extra.append(core.scratchpad.op(sn))
    um = core.user_memory
    if not data.get("changed", True):
        await core.store.write(extra)
        return {"ref": ref, "restored": "nothing changed by the promotion"}
    if kind in ("preference", "rule"):
        key = ref.split(":", 1)[1]
        if previous is not None:
            prep = um.prepare_preference if kind == "preference" else um.prepare_rule
            change = await prep(user, key, previous, replace=True)
            await um.commit(change, extra)
            return {"ref": ref, "restored": previous}
        table = um.prefs if kind == "preference" else um.rules
        record = table.get(user, {}).get(key)
        await _delete_memory(call, record, extra)
        return {"ref": ref, "restored": None}
    if kind == "playbook":
        rid = int(ref.rsplit("#", 1)[-1])
        record = next((b for b in um.playbooks.get(user, []) if b.id == rid), None)
        await _delete_memory(call, record, extra)
        return {"ref": ref, "restored": None}
    if kind == "business":
        await _unappend_agent_md(call, tenant, ref, rec["what"], previous)
        await core.store.write(extra)
        return {"ref": ref, "restored": previous}
    raise MemmanError(CONFLICT, f"cannot undo a promotion to {ref!r}")


async def _delete_memory(call: Call, record: Any, extra: list[Op]) -> None:
    core = call.core
    ops: list[Op] = list(extra)
    if record is not None:
        ops = [("DELETE FROM memory_vectors WHERE id=?", (record.id,)),
               ("DELETE FROM memories WHERE id=?", (record.id,)), *extra]
    await core.store.write(ops)
    if record is not None:
        core.user_memory._unindex(record)
        core.user_memory._publish("deleted", record.user_id, record=record.to_wire())


async def _unappend_agent_md(call: Call, tenant: str, ref: str, text: str,
                             previous: str | None) -> None:
    from memman_daemon.tiers import agentmd

    md = call.core.agent_md
    key = ref.split("#", 1)[1] if "#" in ref else None
    if key and previous is not None:
        await md.append(tenant, previous, key=key, replace=True)
        return
    async with md._lock(tenant):
        path = md.path(tenant)
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        line = agentmd._key_line(key, text) if key else f"- {' '.join(text.split())}"
        lines = current.splitlines()
        if line not in lines:
            return
        lines.remove(line)
        await asyncio.to_thread(agentmd.atomic_write, path, "\n".join(lines) + "\n")
        await md._ingest(tenant)
