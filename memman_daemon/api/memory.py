"""Protocol methods of user memory (append, search, playbook, learn / recall, compact, stats,
clear, list, forget) and of the audit log that records promotions and evictions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memman import names
from memman.errors import NOT_FOUND, MemmanError, invalid_params
from memman.scope import DEFAULT_TENANT, Caller
from memman_daemon.rpc import Call, handles
from memman_daemon.scope import caller_of
from memman_daemon.tiers.everywhere import MIN_COVERAGE, search_everywhere


def parse_ref(record_id: int | str) -> tuple[str | None, str | None, int]:
    """``record_id`` as (kind, session id, number): kind ``memory``, ``entry`` or None (a bare
    number); -32602 naming ``record_id`` for anything else."""
    if isinstance(record_id, int):
        return None, None, record_id
    kind, sep, ref = record_id.partition(":")
    sid, hash_, num = ref.rpartition("#")
    if not hash_:
        sid, num = "", ref
    if not sep or kind not in ("memory", "entry") or (kind == "memory" and hash_) \
            or not num.isascii() or not num.isdigit() or (hash_ and not sid):
        raise invalid_params("record_id", f"expected memory:N, entry:N or entry:SESSION#N, "
                             f"got {record_id[:80]!r}")
    return kind, sid or None, int(num)


@handles(names.MEMORY_FORGET)
async def memory_forget(call: Call, user_id: str, record_id: int | str,
                        opts: dict[str, Any]) -> dict[str, Any]:
    kind, sid, n = parse_ref(record_id)
    caller = (Caller(user_id, opts.get("tenant_id", DEFAULT_TENANT)) if kind == "memory"
              else caller_of(call.app.sessions.by_id, user_id, opts.get("tenant_id")))
    recall = call.app.recall
    if kind != "memory":
        await recall.loaded()  # an entry is found by its row: the start's rows indexed
        s = recall.session_of_entry(caller, n)
        if s is not None and sid is not None and s.id != sid:
            s = None
        # an entry said on another host (shared store), as ``memman_search`` and recall name
        # it (``entry:SESSION#N``, its id here) or by its id alone
        remote = recall.remote_row(n) if s is None else None
        if remote is not None and (not caller.owns(remote.user_id, remote.tenant_id)
                                   or sid is not None and remote.session_id != sid):
            remote = None
        if kind is None:
            mine = await call.app.user_memory.owns(user_id, n)
            if mine and (s is not None or remote is not None):
                where = s.id if s is not None else remote.session_id  # type: ignore[union-attr]
                raise invalid_params("record_id", (
                    f"{n} names both memory record {n} and entry {n} of session {where!r}: "
                    f"pass 'memory:{n}' or 'entry:{where}#{n}'"))
            if mine:
                kind = "memory"
        if kind != "memory":
            if s is not None:
                out = await call.app.engine.remove(s, n, call.client_name)
                return {"forgotten": True, "id": n, "session_id": s.id,
                        "kind": "session_entry", "audit_id": out["audit_id"]}
            if remote is not None:
                rid, audit_id = await _forget_remote(call, remote, n)
                return {"forgotten": True, "id": n, "session_id": rid,
                        "kind": "session_entry", "audit_id": audit_id}
            if kind == "entry":
                raise MemmanError(NOT_FOUND, (
                    f"entry {n} of a session of user {user_id!r} in tenant "
                    f"{caller.tenant_id!r} not found"))
    return await call.app.user_memory.forget(user_id, n, call.client_name)


async def _forget_remote(call: Call, row: Any, record_id: int) -> tuple[str, int]:
    """An entry of the user's session on another host, as recalled here (shared store): it
    leaves recall on every host; its session, there, keeps it. Audited here as a removal
    (no session of this host: the target names the session, ``origin`` its host)."""
    rec, op = call.app.audit.record(
        "remove", row.content, f"session:{row.session_id}#{record_id}", "-", call.client_name,
        user_id=row.user_id, tenant_id=row.tenant_id, entry_id=record_id, type=row.type,
        role=row.role, tokens=0, summary_ids=[], pop=False, origin=row.origin)
    await call.app.recall.forget_remote(record_id, [op])
    return row.session_id, rec.id


@handles(names.AUDIT_LIST)
async def audit_list(call: Call, filter: dict[str, Any]) -> dict[str, Any]:
    return {"records": await call.app.audit.list(filter)}


@handles(names.MEMORY_APPEND)
async def memory_append(call: Call, user_id: str, type: str, entry: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.append(user_id, type, entry, call.client_name)


@handles(names.MEMORY_SEARCH)
async def memory_search(call: Call, user_id: str, type: str, query: str,
                        opts: dict[str, Any]) -> dict[str, Any]:
    if type == "session":
        limit = opts.get("limit") or call.app.config.memory.search_limit
        caller = caller_of(call.app.sessions.by_id, user_id, opts.get("tenant_id"))
        if (project := opts.get("project")) is not None:  # that project's sessions only
            caller = replace(caller, project=project, keeps_project=True)
        results = await call.app.recall.search(caller, query, limit, opts.get("session_id"))
        return {"results": results, "mode": "hybrid"}
    um = call.app.user_memory
    results = await um.search(user_id, type, query, opts)
    mode = "terms" if type == "working" else um.mode_for(opts)
    return {"results": results, "mode": mode}


@handles(names.SEARCH)
async def search(call: Call, user_id: str, query: str, opts: dict[str, Any]) -> dict[str, Any]:
    # the scope: the user within the tenant (``caller_of``); each source applies it
    app = call.app
    caller = caller_of(app.sessions.by_id, user_id, opts.get("tenant_id"))
    floor = opts.get("min_coverage")
    return await search_everywhere(
        caller, query, int(opts.get("limit") or app.config.memory.search_limit),
        MIN_COVERAGE if floor is None else float(floor), config=app.config,
        memory=app.user_memory, docs=app.docs, recall=app.recall)


@handles(names.MEMORY_PLAYBOOK)
async def memory_playbook(call: Call, user_id: str, query: str,
                          opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.playbook(user_id, query, opts, call.client_name)


@handles(names.MEMORY_LEARN)
async def memory_learn(call: Call, user_id: str, key: str, value: Any,
                       opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.learn(user_id, key, value, opts, call.client_name)


@handles(names.MEMORY_RECALL)
async def memory_recall(call: Call, user_id: str, key: str) -> dict[str, Any] | None:
    return await call.app.user_memory.recall(user_id, key)


@handles(names.MEMORY_COMPACT)
async def memory_compact(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.compact(user_id, type, opts, call.client_name)


@handles(names.MEMORY_STATS)
async def memory_stats(call: Call, user_id: str) -> dict[str, Any]:
    return await call.app.user_memory.stats_for(user_id)


@handles(names.MEMORY_CLEAR)
async def memory_clear(call: Call, user_id: str, type: str) -> dict[str, Any]:
    return await call.app.user_memory.clear(user_id, type, call.client_name)


@handles(names.MEMORY_LIST)
async def memory_list(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return {"records": await call.app.user_memory.list(user_id, type, opts)}
