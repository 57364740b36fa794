"""Who may see what, applied to the daemon's rows: the one decision every read path and every
write to an existing object asks (the rules themselves: ``memman.scope``).

- ``owned_session``: a session a caller writes, forgets in or replaces — found, and the
  caller's own (-32002 otherwise).
- ``across_mask`` / ``across_entry``: which rows of the recall index a caller may be shown
  from *other* sessions than the one asking (the window's recall, ``memman_memory_search``
  type ``session``, MCP ``search`` / ``context``). The recall index keeps one corpus per user
  within a tenant, so a corpus never holds another owner's rows; these add private, recall
  off, excluded, forgotten and other projects' (``recall_project``), vectorized for ranking
  (filter before ranking, so no path can forget it) and per row for what is brought along (completing turns, corrections).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from memman.errors import CONFLICT, MemmanError, invalid_params, not_found
from memman.scope import (
    DEFAULT_TENANT,
    Caller,
    across_visible,
    is_private,
    recalls,
    same_project,
)

if TYPE_CHECKING:
    from memman_daemon.model import Entry, Session

# the recall index and its corpora are read here, not imported (they ask this module):
# ``index`` is a ``recall.index.RecallIndex``, ``c`` one of its ``Corpus`` objects
RecallIndex = Any
Corpus = Any

__all__ = ["Caller", "across_entry", "across_mask", "caller_of", "corpus_key", "is_private",
           "owned_session", "owner_conflict", "session_owner"]


def corpus_key(user_id: str, tenant_id: str) -> tuple[str, str]:
    """The recall corpus of an owner: the user within the tenant (for every ``[recall]
    scope``: "tenant" never mixes users)."""
    return (tenant_id, user_id)


def session_owner(s: Session) -> tuple[str, str]:
    """``corpus_key`` of the session's owner (it changes when the session is moved to
    another user)."""
    return corpus_key(s.meta.user_id, s.meta.tenant_id)


def owner_conflict(session_id: str, user_id: str, tenant_id: str,
                   asked: dict[str, str]) -> MemmanError:
    """-32002: ``session_id`` belongs to user/tenant, the caller named another owner."""
    as_ = " and ".join(f"{k.removesuffix('_id')} {v!r}" for k, v in asked.items())
    return MemmanError(CONFLICT, (
        f"session {session_id!r} belongs to user {user_id!r} of tenant {tenant_id!r}; using "
        f"it as {as_} is refused. Use another session id, or pass opts.reassign = true to move "
        "the session to the new owner (written to the audit log)"),
        {"owner": {"user_id": user_id, "tenant_id": tenant_id}, "asked": asked})


def owned_session(by_id: dict[str, Session], caller: Caller, session_id: str) -> Session:
    """The caller's session ``session_id``: -32001 when there is none, -32002 when it is
    another owner's."""
    s = by_id.get(session_id)
    if s is None:
        raise not_found("session", session_id)
    if not caller.owns(s.meta.user_id, s.meta.tenant_id):
        raise owner_conflict(session_id, s.meta.user_id, s.meta.tenant_id,
                             {"user_id": caller.user_id, "tenant_id": caller.tenant_id})
    return s


def caller_of(by_id: dict[str, Session], user_id: str, tenant_id: str | None,
              param: str = "opts.tenant_id") -> Caller:
    """The caller a user-addressed method speaks for: ``tenant_id`` when named; else the one
    tenant the user's sessions are in (``default`` when there are none). A user id with
    sessions in several tenants must name one: -32602 naming ``param`` (never both)."""
    if tenant_id is not None:
        return Caller(user_id, tenant_id)
    tenants = sorted({s.meta.tenant_id for s in by_id.values() if s.meta.user_id == user_id})
    if len(tenants) > 1:
        raise invalid_params(param, f"user {user_id!r} has sessions in tenants "
                             f"{', '.join(map(repr, tenants))}: name one")
    return Caller(user_id, tenants[0] if tenants else DEFAULT_TENANT)


def across_mask(index: RecallIndex, c: Corpus, caller: Caller) -> np.ndarray:
    """Rows of ``c`` from sessions other than the caller's that the caller may be shown:
    alive, its owner's corpus, not private, their session recalls, not excluded by the asking
    session, not forgotten for recall."""
    n = c.n
    if index.corpora.get(corpus_key(caller.user_id, caller.tenant_id)) is not c:
        return np.zeros(n, dtype=bool)
    mask = c.alive() & (np.frombuffer(c.private, dtype=np.int8, count=n) == 0)
    if caller.session_id is not None:
        mask &= ~c.of_session(caller.session_id)
    # sessions of this daemon that opted out of recall (other hosts' rows never hold one)
    # (and sessions the project rule keeps apart: ``memman.scope.same_project``)
    off = [code for sid, code in c.code_of.items()
           if (s := index.sessions.by_id.get(sid)) is not None and (
               not recalls(s.meta.recall)
               or not same_project(caller, s.meta.project, s.meta.recall_project))]
    if off:
        mask &= ~np.isin(np.frombuffer(c.codes, dtype=np.int32, count=n), off)
    hidden = index.forgotten | (index.excluded.get(caller.session_id, set())
                                if caller.session_id is not None else set())
    for eid in hidden:
        row = c.row_of.get(eid)
        if row is not None:
            mask[row] = False
    return mask


def across_entry(index: RecallIndex, c: Corpus, row: int,
                 caller: Caller) -> tuple[Entry, Session | None] | None:
    """The entry of a row of another session, with its session on this daemon (None for
    another host's), when the caller may be shown it; else None."""
    if row < 0 or row >= c.n:
        return None
    eid, sid = c.eids[row], c.sids[row]
    if caller.session_id is not None and sid == caller.session_id and eid not in c.remote:
        return None
    e = c.remote.get(eid)
    if e is not None:  # another host's row: only shareable rows reach the shared table
        got = index.remote_row(eid)
        if got is None or not caller.owns(got.user_id, got.tenant_id) \
                or not same_project(caller, None, False):
            return None
        if eid in index.excluded.get(caller.session_id or "", set()) or eid in index.forgotten:
            return None
        return e, None
    src = index.sessions.by_id.get(sid)
    if src is None:
        return None
    f = src.by_id.get(eid)
    if f is None or not across_visible(
            caller, user_id=src.meta.user_id, tenant_id=src.meta.tenant_id,
            session_recall=src.meta.recall, metadata=f.metadata,
            excluded=eid in index.excluded.get(caller.session_id or "", set()),
            forgotten=eid in index.forgotten, project=src.meta.project,
            keeps_project=src.meta.recall_project):
        return None
    return f, src

