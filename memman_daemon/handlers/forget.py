"""Forgetting one thing: one session entry (or the newest), one user-memory record, one
business document. Each removal is audited with the client that asked and announced to
subscribers; summaries that linked a removed item drop the link and say so."""

from __future__ import annotations

from typing import Any

from memman import names
from memman_daemon.handlers.spine import SESSION_ID
from memman_daemon.params import ROW_ID, AnyOf, Id
from memman_daemon.rpc import Call, Param, method


@method(names.SESSION_REMOVE, Param("session_id", SESSION_ID), Param("entry_id", ROW_ID), writes=True)
async def session_remove(call: Call, session_id: str, entry_id: int) -> dict[str, Any]:
    """Remove one entry of a session's log; linked summaries drop the link and say so."""
    s = call.core.sessions.get(session_id)
    return await call.core.engine.remove(s, entry_id, call.client_name)


@method(names.SESSION_POP, Param("session_id", SESSION_ID), writes=True)
async def session_pop(call: Call, session_id: str) -> dict[str, Any]:
    """Remove and return the newest entry of a session (``removed`` is nil when empty)."""
    s = call.core.sessions.get(session_id)
    return await call.core.engine.remove(s, None, call.client_name)


@method(names.MEMORY_FORGET, Param("user_id", Id("u1")), Param("record_id", ROW_ID), writes=True)
async def memory_forget(call: Call, user_id: str, record_id: int) -> dict[str, Any]:
    """Delete one stored user-memory record (episodic, preference, rule, playbook, summary)."""
    return await call.core.user_memory.forget(user_id, record_id, call.client_name)


@method(names.DOCS_REMOVE, Param("tenant_id", Id("t1")), Param("ref", AnyOf((Id(), ROW_ID))),
        writes=True)
async def docs_remove(call: Call, tenant_id: str, ref: str | int) -> dict[str, Any]:
    """Remove one business document (by doc_id, or by the id of one of its chunks)."""
    return await call.core.docs.remove(tenant_id, ref, call.client_name)
