"""A change counter per owner: what a context answer sent again compares (``Repeats``).

An owner is a recall corpus's key, the user within the tenant (``scope.corpus_key``): a
session's window reads that session and its owner's other sessions (recall, their completing
turns), nothing of another owner. A change an owner's component can attribute is counted for
that owner alone; one it cannot (a config reload, another host's news, a pin's timeline
version) for everyone. So on a daemon with many busy users, one user's adds, analysis and
events leave another's answers as they were, where one daemon-wide counter built every
answer again after any change anywhere.
"""

from __future__ import annotations

from collections.abc import Hashable

Owner = Hashable  #: a corpus key: ``(tenant_id, user_id)``


class Changes:
    def __init__(self) -> None:
        self.everyone = 0  #: changes no owner could be named for
        self._of: dict[Owner, int] = {}

    def bump(self, owner: Owner | None = None) -> None:
        """One change of ``owner``'s (None: of no one known, so of everyone's)."""
        if owner is None:
            self.everyone += 1
        else:
            self._of[owner] = self._of.get(owner, 0) + 1

    def of(self, owner: Owner) -> tuple[int, int]:
        """What a read of ``owner`` depends on here: both numbers change with every change
        that may touch it."""
        return self.everyone, self._of.get(owner, 0)
