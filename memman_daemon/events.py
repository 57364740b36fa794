"""The event bus: every change publishes an event; subscribers get the ones they asked for.

A subscription is a set of topics (empty = all) and a filter (session_id / user_id /
tenant_id). Each subscription numbers what it delivers (``seq`` 1, 2, 3, ...), so a client that
sees a jump knows it missed something and resyncs. Delivery is a non-blocking callback: the
server's connection queues the bytes and drops a subscriber that stops reading.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memman.names import TOPICS
from memman_daemon.changes import Changes, Owner
from memman_daemon.scope import corpus_key

FILTER_KEYS = ("session_id", "user_id", "tenant_id")
#: events that tell of a read, not a change (a context request's, the stats tick, a cache
#: lookup): they leave ``EventBus.changes`` as it is
READS = frozenset({("session", "pruned"), ("session", "series_point"), ("stats", "tick"),
                   ("stats", "shared_store"), ("cache", "hit"), ("cache", "miss")})


@dataclass
class Subscription:
    id: int
    topics: frozenset[str]  #: empty = every topic
    filter: dict[str, str]
    deliver: Callable[[str, dict[str, Any]], None]  #: (event name, payload) -> None; must not block
    seq: int = 0

    def wants(self, topic: str, scope: dict[str, Any]) -> bool:
        if self.topics and topic not in self.topics:
            return False
        return all(scope.get(k) in (None, v) for k, v in self.filter.items())


@dataclass
class EventBus:
    subscriptions: dict[int, Subscription] = field(default_factory=dict)
    published: int = 0  #: events published since start (all topics)
    #: ...of them, those that tell of a change (not in ``READS``), per owner: the event's
    #: user within its tenant, or its session's owner (``owner_of``, set by the app)
    changes: Changes = field(default_factory=Changes)
    owner_of: Callable[[str], Owner | None] = lambda session_id: None
    #: in-process observers (daemon components such as the usage series): called with
    #: (topic, kind, data, scope) for every publish; not subscriptions, never counted as clients
    taps: list[Callable[[str, str, Any, dict[str, Any]], None]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def subscribe(self, topics: list[str], filter: dict[str, str],
                  deliver: Callable[[str, dict[str, Any]], None]) -> Subscription:
        unknown = [t for t in topics if t not in TOPICS]
        if unknown:
            raise ValueError(f"unknown topic(s) {unknown}; known topics: {', '.join(TOPICS)}")
        bad = [k for k in filter if k not in FILTER_KEYS]
        if bad:
            raise ValueError(f"unknown filter key(s) {bad}; known keys: {', '.join(FILTER_KEYS)}")
        sub = Subscription(next(self._ids), frozenset(topics), dict(filter), deliver)
        self.subscriptions[sub.id] = sub
        return sub

    def _owner(self, session_id: str | None, user_id: str | None,
               tenant_id: str | None) -> Owner | None:
        """Whose change an event tells of: its user within its tenant when it names both,
        else its session's owner; None (everyone's) when it names neither."""
        if user_id is not None and tenant_id is not None:
            return corpus_key(user_id, tenant_id)
        return self.owner_of(session_id) if session_id is not None else None

    def unsubscribe(self, sub_id: int) -> bool:
        return self.subscriptions.pop(sub_id, None) is not None

    def publish(self, topic: str, kind: str,
                data: dict[str, Any] | Callable[[], dict[str, Any]] | None = None, *,
                session_id: str | None = None, user_id: str | None = None,
                tenant_id: str | None = None) -> None:
        """Send ``{kind, seq, subscription, scope..., **data}`` to every matching subscription.

        ``data`` may be a function: it is called only if someone is listening (and once).
        """
        self.published += 1
        if (topic, kind) not in READS:
            self.changes.bump(self._owner(session_id, user_id, tenant_id))
        scope = {"session_id": session_id, "user_id": user_id, "tenant_id": tenant_id}
        for tap in self.taps:
            tap(topic, kind, data, scope)
        if not self.subscriptions:
            return
        name = TOPICS[topic]
        body: dict[str, Any] | None = None
        for sub in list(self.subscriptions.values()):
            if sub.wants(topic, scope):
                if body is None:
                    body = {k: v for k, v in scope.items() if v is not None}
                    body.update((data() if callable(data) else data) or {})
                sub.seq += 1
                sub.deliver(name, {"kind": kind, "seq": sub.seq, "subscription": sub.id, **body})
