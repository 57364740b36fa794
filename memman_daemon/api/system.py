"""Protocol methods about the daemon itself: api info, ping, client info and the connected
clients, stats, subscriptions, token counting, and ``memman_undo`` (reversing the caller's
last pin, unpin, eviction or promotion from the audit log).
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

from memman import __version__, api, names
from memman.config import DEFAULT_MODEL
from memman.errors import CONFLICT, MemmanError, invalid_params, not_found
from memman_daemon.rpc import Call, handles
from memman_daemon.storage.sqlite import audit as audit_rows
from memman_daemon.storage.sqlite.store import Op

UNDOABLE = ("pin", "unpin", "evict", "promote", "recall_exclude", "recall_include")
_SCAN = 500  #: audit records looked at for the newest undoable one


@handles(names.GET_API_INFO)
def get_api_info(call: Call) -> dict[str, Any]:
    return {
        "api_level": names.API_LEVEL,
        "version": __version__,
        "methods": [m.info() for m in sorted(api.METHODS, key=lambda m: m.name)],
        "events": sorted({*names.TOPICS.values(), names.ERROR_EVENT}),
        "topics": list(names.TOPICS),
    }


@handles(names.PING)
def ping(call: Call) -> str:
    return "pong"


@handles(names.SET_CLIENT_INFO)
def set_client_info(call: Call, name: str, info: dict[str, Any]) -> dict[str, Any]:
    call.connection.error_style = info.get("errors", "memman")
    call.connection.name = name
    call.connection.client_info = dict(info)
    return {"connection": call.connection.id, "name": name}


@handles(names.STATS)
def stats(call: Call) -> dict[str, Any]:
    return call.app.stats(call.connection.server.state.stats())


@handles(names.SUBSCRIBE)
def subscribe(call: Call, topics: list[Any], filter: dict[str, Any]) -> dict[str, Any]:
    conn = call.connection
    try:
        sub = call.app.events.subscribe(topics, filter, conn.deliver_event)
    except ValueError as exc:
        raise invalid_params("topics" if "topic" in str(exc) else "filter", str(exc)) from None
    conn.subscriptions.add(sub.id)
    return {"subscription": sub.id, "topics": sorted(sub.topics) or list(names.TOPICS),
            "filter": sub.filter}


@handles(names.UNSUBSCRIBE)
def unsubscribe(call: Call, subscription: int) -> dict[str, Any]:
    conn = call.connection
    removed = subscription in conn.subscriptions and call.app.events.unsubscribe(subscription)
    conn.subscriptions.discard(subscription)
    return {"removed": bool(removed)}


@handles(names.COUNT_TOKENS)
def count_tokens(call: Call, messages: list[Any], model: str | dict[str, Any],
                 tools: list[Any] | dict[str, Any]) -> dict[str, Any]:
    if isinstance(model, dict):
        opts = model  # the options map {model, tools} (checked by the declaration)
        if "tools" in opts:
            tools = opts["tools"]
        model = opts.get("model", DEFAULT_MODEL)
    if isinstance(tools, dict):
        tools = tools.get("tools") or []
    counter = call.app.tokens
    message_tokens = counter.count_messages(messages, model)
    tool_tokens = counter.count_tools(tools, model)
    return {"tokens": message_tokens + tool_tokens, "message_tokens": message_tokens,
            "tool_tokens": tool_tokens,
            "per_message": [counter.count_message(m, model) for m in messages],
            "encoding": counter.encoding_name(model), "model": model}


def _peer_pid(conn: Any) -> int | None:
    """The peer's pid from SO_PEERCRED (Linux); None where the platform does not say."""
    transport = conn.transport  # None once the connection is closed
    sock = transport.get_extra_info("socket") if transport is not None else None
    cred = getattr(socket, "SO_PEERCRED", None)
    if sock is None or cred is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i"))
    except OSError:
        return None
    pid, _uid, _gid = struct.unpack("3i", raw)
    return pid or None


@handles(names.CLIENTS_LIST)
def clients_list(call: Call) -> dict[str, Any]:
    conns = sorted(call.connection.server.state.connections, key=lambda c: c.id)
    now = time.time()
    subs = call.app.events.subscriptions
    out = []
    for c in conns:
        since = float(c.connected_at)
        requests = int(c.requests)
        age = max(now - since, 1e-9)
        out.append({
            "id": c.id, "name": c.name, "pid": _peer_pid(c), "since": since,
            "requests": requests, "requests_per_s": round(requests / age, 3),
            "info": dict(c.client_info),
            "subscriptions": [{"id": sid, "topics": sorted(subs[sid].topics),
                               "filter": dict(subs[sid].filter), "delivered": subs[sid].seq}
                              for sid in sorted(c.subscriptions) if sid in subs],
            "you": c is call.connection,
        })
    return {"clients": out, "at": now}


# ``memman_undo`` reads the audit log, which records every pin, unpin, eviction and promotion
# with what is needed to reverse it (the entry id and its previous pin state; the evicted
# snippet or cache entry in full; the promotion's target and the value it replaced). It picks
# the newest such record of the calling client (``opts.client`` to name another,
# ``opts.session_id`` to narrow it, ``opts.audit_id`` for one record) that no earlier undo
# reversed, applies the inverse, and writes an ``undo`` record naming the one it reversed — in
# the same transaction where the tier allows. Undoing again walks further back. Automatic
# evictions (LRU, capacity, expiry, a deleted session) are not the client's actions and are
# never undone.

async def _candidates(call: Call, client: str, session_id: str | None) -> list[tuple[Any, ...]]:
    return await audit_rows.of_client(call.app.store, client, UNDOABLE, session_id, _SCAN)


async def _undone(call: Call) -> set[int]:
    out: set[int] = set()
    for data in await audit_rows.undo_data(call.app.store):
        with_id = json.loads(data).get("undone")
        if isinstance(with_id, int):
            out.add(with_id)
    return out


def _undoable(action: str, data: dict[str, Any]) -> bool:
    if action == "evict":
        return data.get("reason") == "explicit" and ("snippet" in data or "entry" in data)
    return True


@handles(names.UNDO)
async def undo(call: Call, opts: dict[str, Any]) -> dict[str, Any]:
    client = opts.get("client", call.client_name)
    session_id = opts.get("session_id")
    audit_id = opts.get("audit_id")
    dry_run = opts.get("dry_run", False)
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
    shared = call.app.separate_audit  # None with SQLite: one audit log, read above
    if shared is not None and audit_id is None:  # promotions are audited in the shared store
        newer = await shared.newest_promotion(client, session_id, rec["at"] if rec else None)
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
    urec, uop = call.app.audit.record(
        "undo", rec["what"], f"audit#{rec['id']}", rec["source"], call.client_name,
        session_id=rec["session_id"], user_id=rec["user_id"], tenant_id=rec["tenant_id"],
        undone=rec["id"], undone_action=rec["action"])
    action = rec["action"]
    if action in ("pin", "unpin"):
        result = await _unpin(call, rec, uop)
    elif action in ("recall_exclude", "recall_include"):
        result = await _unexclude(call, rec, uop)
    elif action == "evict" and "snippet" in rec["data"]:
        result = await _restore_snippet(call, rec, uop)
    elif action == "evict":
        result = await _restore_cache(call, rec, uop)
    else:
        result = await _unpromote(call, rec, uop)
    return {"undone": rec, "audit_id": urec.id, "result": result}


def _session_of(call: Call, rec: dict[str, Any]) -> Any:
    """The session the action was in, refused when it was deleted after the action (a session
    opened again under the same id is another one: undo never writes into it)."""
    s = call.app.sessions.get(rec["session_id"])
    began = s.meta.opened_at or s.meta.created_at
    if began > rec["at"]:
        raise MemmanError(CONFLICT, f"session {rec['session_id']!r} was deleted after this "
                          f"{rec['action']} (audit #{rec['id']}) and opened again (or imported) "
                          "since; undo does not write into the new session",
                          {"audit_id": rec["id"], "session_id": rec["session_id"],
                           "action_at": rec["at"], "session_opened_at": began})
    return s


async def _unpin(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    s = _session_of(call, rec)
    entry_id = int(rec["data"]["entry_id"])
    previous = bool(rec["data"].get("previous"))
    return await call.app.engine.pin(s, entry_id, previous, ops=[uop])


async def _unexclude(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    sid = rec["session_id"]
    call.app.sessions.get(sid)
    entry_id = int(rec["data"]["entry_id"])
    previous = bool(rec["data"].get("previous"))
    recall = call.app.recall
    op = (recall.exclude_op(sid, entry_id, call.app.clock.now()) if previous
          else recall.include_op(sid, entry_id))
    await call.app.store.write([op, uop])
    recall.set_excluded(sid, entry_id, previous)
    return {"session_id": sid, "entry_id": entry_id, "excluded": previous}


async def _restore_snippet(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    from memman_daemon.tiers.scratchpad import Snippet

    _session_of(call, rec)
    return await call.app.scratchpad.restore(Snippet.from_wire(rec["data"]["snippet"]), [uop])


async def _restore_cache(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    from memman_daemon.tiers.cache import CacheEntry

    _session_of(call, rec)
    return await call.app.cache.restore(CacheEntry.from_wire(rec["data"]["entry"]), [uop])


#: the layer of user memory a promotion's target lives in (cleared by memory_clear)
_LAYER = {"preference": "semantic", "rule": "procedural", "playbook": "procedural"}


async def _scope_still_there(call: Call, rec: dict[str, Any], kind: str) -> None:
    """Refuse (-32002) to undo a promotion into a scope deleted after it: the user's memory
    layer cleared, or the tenant's agent.md document removed, since the action."""
    store = call.app.store
    if kind in _LAYER:
        for aid, data in await audit_rows.later(store, rec["id"], "clear",
                                                user_id=rec["user_id"]):
            if _LAYER[kind] in (data.get("counts") or {}):
                raise MemmanError(CONFLICT, f"the {_LAYER[kind]} memory of user "
                                  f"{rec['user_id']!r} was cleared after this promotion (audit "
                                  f"#{aid} after #{rec['id']}); undo does not write into it",
                                  {"audit_id": rec["id"], "cleared_by": aid})
    elif kind == "business":
        source = f"docs:{rec['tenant_id']}/agent.md"
        for aid, _ in await audit_rows.later(store, rec["id"], "remove",
                                             tenant_id=rec["tenant_id"], source=source):
            raise MemmanError(CONFLICT, f"agent.md of tenant {rec['tenant_id']!r} was removed "
                              f"after this promotion (audit #{aid} after #{rec['id']}); undo "
                              "does not write into it", {"audit_id": rec["id"], "removed_by": aid})


async def _unpromote(call: Call, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
    """Put the target back as it was (the replaced value, or no record), and unmark the
    snippet when it is still in the scratchpad."""
    app = call.app
    data = rec["data"]
    kind = data.get("target_kind") or rec["target"].split(":", 1)[0]
    ref: str = rec["target"]
    previous = data.get("replaced")
    user, tenant = rec["user_id"], rec["tenant_id"]
    extra: list[Op] = [uop]
    sn = None
    sid = rec["session_id"]
    if sid and sid in app.scratchpad.by_session:
        snippet_id = int(rec["source"].rsplit("#", 1)[-1])
        sn = app.scratchpad.by_session[sid].get(snippet_id)
        if sn is not None:
            kept = [p for p in sn.promoted if p.get("audit_id") != rec["id"]]
            if len(kept) != len(sn.promoted):
                sn.promoted[:] = kept
                extra.append(app.scratchpad.op(sn))
    um = app.user_memory
    if not data.get("changed", True):
        await app.store.write(extra)
        return {"ref": ref, "restored": "nothing changed by the promotion"}
    await _scope_still_there(call, rec, kind)
    if kind in ("preference", "rule"):
        key = ref.split(":", 1)[1]
        if previous is not None:
            prep = um.prepare_preference if kind == "preference" else um.prepare_rule
            change = await prep(user, key, previous, replace=True)
            await um.commit(change, extra)
            return {"ref": ref, "restored": previous}
        await um.delete(await um.record(user, kind, key), extra)
        return {"ref": ref, "restored": None}
    if kind == "playbook":
        rid = int(ref.rsplit("#", 1)[-1])
        await um.delete(await um.record(user, kind, record_id=rid), extra)
        return {"ref": ref, "restored": None}
    if kind == "business":
        await app.agent_md.unappend(tenant, ref, rec["what"], previous)
        await app.store.write(extra)
        return {"ref": ref, "restored": previous}
    raise MemmanError(CONFLICT, f"cannot undo a promotion to {ref!r}")
