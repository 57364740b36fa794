"""A context answer sent again: the same request of a session, asked while nothing its answer
was built from has changed, gets that answer instead of a second build of it.

An agent asks for its window at each step of a turn; a hook and the agent ask in the same
turn; a client retries. Each such read built the whole window again (~10 ms at 1,000 entries
beside 100 past sessions, ~20 ms at 10,000).

"Nothing changed" is read from the components' own counters (``state``, set by the app),
never from a clock, each for the session's owner (``memman_daemon/changes.py``: another
user's changes leave them as they are):

* the session log: ``Sessions.changes``, bumped as every commit starts and as it ends (memory
  changes on either side of a commit);
* the timelines: ``Timelines.state`` (None while the follower still has entries to analyse: a
  read may analyse some);
* the recall index: ``RecallIndex.state`` for the session's corpus (its rows, vectors and
  stand-ins, exclusions, forgets, another host's rows, the entries waiting to be indexed; None
  while the start loads);
* every published change (``EventBus.changes``: a config reload, another host's news).

The request is part of the key by value: budget, model, question, tool definitions' tokens,
the cached tool results sent along, the recall flag, and the lines of the user's preferences,
rules and playbook (the memory tier is asked on every request; its search is not counted
here). An answer is kept only when the state did not change while it was built (a read may
step a timeline or make stand-in vectors: the next read then builds again). One answer per
request of a session (an agent's and its hook's, a TUI's peek: each keeps its own); the least
recently asked give way past ``TOKENS_KEPT`` tokens of kept answers in all (an 8,000-token
answer holds ~0.3 MB: ~32 answers, ~10 MB; the daemon keeps under 1 GB at 100,000 entries).

``check`` (tests; ``MEMMAN_CHECK_REPEATS=1``): every answer sent again is built again too and
compared; a difference raises (a counter that missed a change).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memman.types import ContextAnswer
    from memman_daemon.model import Session

TOKENS_KEPT = 256_000  #: the kept answers' tokens in all (each counted at least ``FLOOR``)
FLOOR = 256


class StaleRepeat(AssertionError):
    """``check``: an answer sent again differs from the same request built now."""


class Repeats:
    def __init__(self) -> None:
        #: set by the app: the daemon's state a read of the session depends on (None: not
        #: settled, nothing is sent again)
        self.state: Callable[[Session], Hashable | None] = lambda s: None
        self.check = os.environ.get("MEMMAN_CHECK_REPEATS", "") not in ("", "0")
        #: (session id, the request's values as text) -> (session object, the request's
        #: values, state, answer): a few requests of one session (an agent's and a hook's, a
        #: TUI's peek) each keep theirs
        self._last: OrderedDict[tuple[str, str],
                                tuple[int, tuple[Any, ...], Hashable, ContextAnswer]] = \
            OrderedDict()
        self._tokens = 0  #: the kept answers' weight (``_weight``)

    def get(self, s: Session, asked: tuple[Any, ...]) -> ContextAnswer | None:
        """The answer kept for ``s`` when ``asked`` (the request's values) is what it was
        built for and the state is the one it was built from."""
        key = (s.id, repr(asked))
        got = self._last.get(key)
        if got is None or got[0] != id(s) or got[1] != asked:
            return None
        st = self.state(s)
        if st is None or st != got[2]:
            return None
        self._last.move_to_end(key)
        return _copy(got[3])

    def put(self, s: Session, built_from: Hashable | None, asked: tuple[Any, ...],
            answer: ContextAnswer) -> None:
        """Keep ``answer`` of ``s``, built from state ``built_from`` (read by the build once
        nothing more was awaited), when the state is still that after it (the build itself
        changed nothing: a read may step a timeline or make stand-in vectors)."""
        key = (s.id, repr(asked))
        self._drop(key)
        if built_from is None or self.state(s) != built_from:
            return
        self._last[key] = (id(s), asked, built_from, _copy(answer))
        self._tokens += _weight(answer)
        while self._tokens > TOKENS_KEPT and len(self._last) > 1:
            self._drop(next(iter(self._last)))

    def forget(self, session_id: str) -> None:
        """The session was deleted, cleared or replaced: its answers go now (not when the
        others push them out)."""
        for key in [k for k in self._last if k[0] == session_id]:
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        got = self._last.pop(key, None)
        if got is not None:
            self._tokens -= _weight(got[3])

    def verify(self, again: ContextAnswer, fresh: ContextAnswer) -> None:
        if again != fresh:
            diff = sorted(k for k in {*again, *fresh} if again.get(k) != fresh.get(k))  # type: ignore[misc]
            raise StaleRepeat(f"a context answer sent again differs from a fresh build in {diff}")


def _weight(answer: ContextAnswer) -> int:
    return max(int(answer["tokens"]), FLOOR)


def _copy(answer: ContextAnswer) -> ContextAnswer:
    """The answer's own dict (a caller may add to it); its lists and messages are shared,
    as every reader only reads them."""
    return answer.copy()
