"""Protocol methods about the daemon itself: api info, ping, client info and the connected
clients, stats, subscriptions, token counting, and ``memman_undo`` (``memman_daemon/undo.py``
reverses the caller's last pin, unpin, eviction, recall exclusion or promotion).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from memman import __version__, api, names
from memman.config import DEFAULT_MODEL
from memman.errors import invalid_params
from memman_daemon.rpc import Call, handles


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
    if isinstance(model, dict):  # the options map {model, tools} (checked by the declaration)
        if "tools" in model:
            tools = model["tools"]
        name: str = model.get("model", DEFAULT_MODEL)
    else:
        name = model
    if isinstance(tools, dict):
        tools = tools.get("tools") or []
    counter = call.app.tokens
    message_tokens = counter.count_messages(messages, name)
    tool_tokens = counter.count_tools(tools, name)
    return {"tokens": message_tokens + tool_tokens, "message_tokens": message_tokens,
            "tool_tokens": tool_tokens,
            "per_message": [counter.count_message(m, name) for m in messages],
            "encoding": counter.encoding_name(name), "model": name}


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




@handles(names.UNDO)
async def undo(call: Call, opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.undo.undo(call.client_name, opts)
