"""What both clients share to survive a daemon restart: the retry policy, which calls may be
retried, and the subscriptions they re-create, with gaps in event numbers reported.

A call is retried (after ``RetryPolicy`` backoff, a bounded number of times) when

* the daemon answered -32007 (``Busy``: it is shutting down and did not run the call), or
* the connection was down before the call was sent (the client reconnects first), or
* the connection was lost while the call was in flight *and* the method only reads (a write's
  outcome is unknown then, so it raises ``ConnectionLost`` and the caller decides).

A connection the daemon refused on purpose (-32004 too many clients, -32005 forbidden) is not
retried.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from memman import api
from memman.errors import FORBIDDEN, LIMIT_EXCEEDED, Busy, ConnectionLost, MemmanError

#: methods that only read (safe to send again after a connection was lost in flight)
READ_ONLY: frozenset[str] = frozenset(m.name for m in api.METHODS if not m.writes)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for reconnecting and for -32007 answers.

    ``RetryPolicy(attempts=0)`` (or ``retry=False`` to a client) turns both off: every lost
    connection and every -32007 raises at once.
    """

    attempts: int = 8  #: retries after the first failure of one call (0 = off)
    initial_delay_s: float = 0.05  #: first wait (seconds)
    max_delay_s: float = 2.0  #: longest single wait (seconds)
    multiplier: float = 2.0  #: each wait is this many times the previous one
    reconnect: bool = True  #: reconnect after a lost connection
    retry_busy: bool = True  #: retry calls answered -32007

    def delays(self) -> Iterator[float]:
        delay = self.initial_delay_s
        for _ in range(max(0, self.attempts)):
            yield min(delay, self.max_delay_s)
            delay *= self.multiplier

    @classmethod
    def of(cls, retry: RetryPolicy | bool | None) -> RetryPolicy:
        if retry is None or retry is True:
            return cls()
        if retry is False:
            return cls(attempts=0, reconnect=False, retry_busy=False)
        return retry


NO_RETRY = RetryPolicy(attempts=0, reconnect=False, retry_busy=False)


def retryable(exc: MemmanError, method: str, sent: bool, policy: RetryPolicy) -> bool:
    """May ``method`` be sent again after ``exc``? (``sent``: it had left before the loss.)"""
    if isinstance(exc, Busy):
        return policy.retry_busy
    if isinstance(exc, ConnectionLost):
        return policy.reconnect and (not sent or method in READ_ONLY)
    return False


REFUSALS = (LIMIT_EXCEEDED, FORBIDDEN)  #: the daemon turned this client away: retrying cannot help


def next_retry(exc: MemmanError, method: str, sent: bool, policy: RetryPolicy,
               delays: Iterator[float] | None,
               closed_by_caller: bool) -> tuple[float, Iterator[float]]:
    """The wait before sending ``method`` again after ``exc``, and the delays left (made at the
    first failure, so the common path pays nothing). Raises ``exc`` when the call must not be
    tried again: closed by the caller, refused, not retryable, or out of tries."""
    if closed_by_caller or exc.code in REFUSALS or not retryable(exc, method, sent, policy):
        raise exc
    if delays is None:
        delays = policy.delays()
    delay = next(delays, None)
    if delay is None:
        raise exc
    return delay, delays


@dataclass(frozen=True)
class EventGap:
    """Events of a subscription that may have been missed: resync with the list/get methods.

    ``reason`` is ``"seq"`` (a jump in ``seq`` on one connection: ``missed`` events are known
    lost) or ``"reconnected"`` (the subscription was re-created after a lost connection; what
    happened meanwhile is unknown, ``missed`` is None).
    """

    subscription: int  #: the client's id for the subscription (stable across reconnects)
    reason: str
    last_seq: int  #: the last ``seq`` received before the gap
    seq: int | None  #: the ``seq`` that revealed it (None for a reconnect)
    missed: int | None  #: how many events were missed, when known


GapCallback = Callable[[EventGap], Any]


@dataclass
class Subscribed:
    """One subscription as the client keeps it: enough to re-create it after a reconnect."""

    id: int  #: the id the caller got (stable across reconnects)
    topics: list[str]
    filter: dict[str, str]
    callback: Callable[[str, dict[str, Any]], Any] | None
    server_id: int = 0  #: the id on the current connection
    last_seq: int = 0


@dataclass
class Subscriptions:
    """The client's subscriptions: stable ids, server ids per connection, ``seq`` checks."""

    by_id: dict[int, Subscribed] = field(default_factory=dict)
    by_server: dict[int, Subscribed] = field(default_factory=dict)
    gaps: list[EventGap] = field(default_factory=list)  #: every gap seen, oldest first
    on_gap: GapCallback | None = None
    #: events whose subscription was not known yet: the daemon may push one between answering
    #: memman_subscribe and the client reading that answer; they are matched when it is
    unmatched: collections.deque[tuple[str, dict[str, Any]]] = field(
        default_factory=lambda: collections.deque(maxlen=1024))
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def add(self, server_id: int, topics: list[str], filter: dict[str, str],
            callback: Callable[[str, dict[str, Any]], Any] | None) -> Subscribed:
        local = server_id if server_id not in self.by_id else max(self.by_id) + 1
        sub = Subscribed(local, list(topics), dict(filter), callback, server_id)
        self.by_id[local] = sub
        self.by_server[server_id] = sub
        return sub

    def early_events(self, sub: Subscribed) -> list[tuple[str, dict[str, Any]]]:
        """(event name, payload) for ``sub`` that arrived before it was known, now checked and
        re-labelled (in place: a queue holding them sees the stable id)."""
        mine = [e for e in self.unmatched if e[1].get("subscription") == sub.server_id]
        if not mine:
            return []
        for e in mine:
            self.unmatched.remove(e)
        return [e for e in mine if self.event(e[1], e[0]) is sub]

    def remove(self, sub_id: int) -> Subscribed | None:
        sub = self.by_id.pop(sub_id, None)
        if sub is not None:
            self.by_server.pop(sub.server_id, None)
        return sub

    def connection_lost(self) -> None:
        self.by_server.clear()
        self.unmatched.clear()

    def resubscribed(self, sub: Subscribed, server_id: int) -> EventGap:
        sub.server_id = server_id
        self.by_server[server_id] = sub
        gap = EventGap(sub.id, "reconnected", sub.last_seq, None, None)
        sub.last_seq = 0
        self._report(gap)
        return gap

    def event(self, payload: dict[str, Any], name: str = "") -> Subscribed | None:
        """Check ``seq``, put the stable id into the payload; the subscription, if it is ours."""
        sub = self.by_server.get(payload.get("subscription"))  # type: ignore[arg-type]
        if sub is None:
            if isinstance(payload.get("subscription"), int):
                self.unmatched.append((name, payload))
            return None
        seq = payload.get("seq")
        if isinstance(seq, int):
            if seq != sub.last_seq + 1:
                missed = seq - sub.last_seq - 1
                self._report(EventGap(sub.id, "seq", sub.last_seq, seq,
                                      missed if missed > 0 else None))
            sub.last_seq = seq
        payload["subscription"] = sub.id
        return sub

    def _report(self, gap: EventGap) -> None:
        self.gaps.append(gap)
        if self.on_gap is not None:
            self.on_gap(gap)
