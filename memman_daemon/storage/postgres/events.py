"""Events of the shared tiers across daemons, through PostgreSQL's LISTEN/NOTIFY.

Every event this daemon publishes on a shared topic (``memory``, ``docs``, and the
scratchpad's ``promoted`` / ``conflict``) is also sent, after the change committed, as a JSON
``pg_notify`` on the ``memman_events`` channel. Each daemon LISTENs there and publishes the
events of the others on its own bus — to its subscribers they look like local ones, numbered
with their subscription's usual ``seq``, plus ``origin`` (host:pid of the daemon that made the
change). A daemon ignores its own events. NOTIFY payloads are limited to 8000 bytes: long text
values are cut (``truncated: true``); the record itself is in the shared store.

Events of an outage are not replayed: when the shared store comes back, subscribers get a
``stats`` event ``shared_store`` with the new state, and resync with the list methods.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memman_daemon.events import EventBus

log = logging.getLogger(__name__)

SHARED_TOPICS = ("memory", "docs")
SHARED_KINDS = {"scratchpad": ("promoted", "conflict")}
#: signals between daemons only (``storage/postgres/recall.py``): never a subscriber's event
INTERNAL_TOPICS = ("recall",)
MAX_PAYLOAD = 7900
CUT = 500


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value[:50]]
    return value


def encode(origin: str, topic: str, kind: str, data: dict[str, Any], scope: dict[str, Any]) -> str:
    msg = {"origin": origin, "topic": topic, "kind": kind, "scope": scope, "data": data}
    text = json.dumps(msg, ensure_ascii=False, default=str)
    if len(text.encode()) <= MAX_PAYLOAD:
        return text
    for limit in (CUT, 100):
        msg["data"] = {**_cut(data, limit), "truncated": True}
        text = json.dumps(msg, ensure_ascii=False, default=str)
        if len(text.encode()) <= MAX_PAYLOAD:
            return text
    msg["data"] = {"truncated": True}
    return json.dumps(msg, ensure_ascii=False, default=str)


@dataclass
class SharedEventBus(EventBus):
    """The event bus of a daemon with a shared store."""

    send: Callable[[str], None] | None = None  #: PgStore.notify
    origin: str = ""
    #: called with (topic, kind, scope) for each event from another daemon
    on_remote: list[Callable[[str, str, dict[str, Any]], None]] = field(default_factory=list)
    remote_received: int = 0

    def publish(self, topic: str, kind: str,
                data: dict[str, Any] | Callable[[], dict[str, Any]] | None = None, *,
                session_id: str | None = None, user_id: str | None = None,
                tenant_id: str | None = None) -> None:
        shared = topic in SHARED_TOPICS or kind in SHARED_KINDS.get(topic, ())
        if shared and self.send is not None:
            data = (data() if callable(data) else data) or {}
            scope = {k: v for k, v in (("session_id", session_id), ("user_id", user_id),
                                       ("tenant_id", tenant_id)) if v is not None}
            try:
                self.send(encode(self.origin, topic, kind, data, scope))
            except Exception:
                log.exception("event not sent to other daemons")
        super().publish(topic, kind, data, session_id=session_id, user_id=user_id,
                        tenant_id=tenant_id)

    def receive(self, payload: str) -> None:
        """An event from the LISTEN connection."""
        try:
            msg = json.loads(payload)
            origin, topic, kind = msg["origin"], msg["topic"], msg["kind"]
            scope, data = msg.get("scope") or {}, msg.get("data") or {}
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed shared event: %.200s", payload)
            return
        if origin == self.origin:
            return
        self.remote_received += 1
        self.changes.bump()  # (another host's news, whatever its topic: everyone's)
        if topic not in INTERNAL_TOPICS:
            EventBus.publish(self, topic, kind, {**data, "origin": origin},
                             session_id=scope.get("session_id"), user_id=scope.get("user_id"),
                             tenant_id=scope.get("tenant_id"))
        for fn in self.on_remote:
            try:
                fn(topic, kind, scope)
            except Exception:
                log.exception("reacting to a shared event failed")
