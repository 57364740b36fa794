"""Who is connected: name, pid, since, requests, subscriptions (the TUI's clients view)."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from memman import names
from memman_daemon.rpc import Call, method


def _peer_pid(conn: Any) -> int | None:
    """The peer's pid from SO_PEERCRED (Linux); None where the platform does not say."""
    transport = getattr(conn, "transport", None)
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


@method(names.CLIENTS_LIST)
def clients_list(call: Call) -> dict[str, Any]:
    """Every open connection, oldest first; ``you`` marks the caller's own."""
    server = getattr(call.connection, "server", None)
    conns = sorted(getattr(getattr(server, "state", None), "connections", ()) or (),
                   key=lambda c: c.id)
    now = time.time()
    subs = call.core.events.subscriptions
    out = []
    for c in conns:
        since = float(getattr(c, "connected_at", now))
        requests = int(getattr(c, "requests", 0))
        age = max(now - since, 1e-9)
        out.append({
            "id": c.id, "name": c.name, "pid": _peer_pid(c), "since": since,
            "requests": requests, "requests_per_s": round(requests / age, 3),
            "info": dict(getattr(c, "client_info", {}) or {}),
            "subscriptions": [{"id": sid, "topics": sorted(subs[sid].topics),
                               "filter": dict(subs[sid].filter), "delivered": subs[sid].seq}
                              for sid in sorted(c.subscriptions) if sid in subs],
            "you": c is call.connection,
        })
    return {"clients": out, "at": now}
