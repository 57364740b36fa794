"""Who may see what: the one rule of memman's scope, for every path and both sides of the wire.

A *caller* is a user within a tenant, and — when a session asks (its window, its MCP server) —
that session. The daemon's ``memman_daemon/scope.py`` applies these rules to its rows (the
recall index, sessions, memory, documents); ``memman mcp`` and the adapters apply the same
ones before they write to a session they were handed. Nothing else decides.

- **A session belongs to one user within one tenant.** Only its owner reads, writes, forgets
  or replaces it; another owner's write is refused (-32002) unless it asks to move the session
  (``reassign``, audited).
- **What sessions said is the user's within the tenant.** Another user, or the same user id
  in another tenant, never sees it — whatever ``[recall] scope`` says ("tenant" names the same
  corpus: the user's sessions within that tenant, never other users').
- **User memory** (preferences, rules, playbooks, episodic records) is the user id's: it is
  what the person asked to be remembered everywhere, so it applies in every tenant of that
  user id. Another user id never reads, writes or forgets it.
- **Across sessions** (recall, search over the user's sessions) an entry is shown only when it
  is not private (``metadata.private`` is exactly ``true``), its session takes part in recall
  (``recall`` is not false), the asking session has not excluded it, and it was not forgotten
  for recall. Its own session reads it regardless.
- **Projects** (a coding agent's conversations, ``memman hook``): a session opened with
  ``recall_project`` keeps to its ``project``: it recalls only sessions recorded with the same
  project, and only they recall it (a search names the project with ``opts.project``). An
  entry of another host's session, whose project is not known here, is not shown to a caller
  that keeps to a project.
- **A statement that replaces a value** is shown under the same rules; a value whose
  replacement may not be shown is not shown either (never the stale value alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Caller:
    """Who asks: a user within a tenant; ``session_id`` when one session asks (its own entries
    are always its own); ``uid``: the socket peer's OS user, when known."""

    user_id: str
    tenant_id: str = DEFAULT_TENANT
    session_id: str | None = None
    uid: int | None = None
    project: str = ""  #: the asking session's project (or the one a search names)
    keeps_project: bool = False  #: shown only what sessions of ``project`` said

    def owns(self, user_id: str, tenant_id: str) -> bool:
        """The caller is that owner: same user id, same tenant (exact strings)."""
        return self.user_id == user_id and self.tenant_id == tenant_id

    def asking(self, session_id: str | None) -> Caller:
        return Caller(self.user_id, self.tenant_id, session_id, self.uid, self.project,
                      self.keeps_project)


def is_private(metadata: Any) -> bool:
    """``metadata.private`` is a boolean (the schema refuses anything else); only ``True``
    hides an entry from other sessions."""
    return isinstance(metadata, dict) and metadata.get("private") is True


def recalls(session_recall: Any) -> bool:
    """A session takes part in recall unless it was opened with ``recall: false``."""
    return session_recall is not False


def same_project(caller: Caller, project: str | None, keeps_project: bool) -> bool:
    """The project rule between a caller and a session (``project`` None: another host's,
    not known here): when either keeps to its project, both name the same one."""
    if project is None:
        return not caller.keeps_project
    if not (caller.keeps_project or keeps_project):
        return True
    return bool(caller.project) and caller.project == project


def across_visible(caller: Caller, *, user_id: str, tenant_id: str, session_recall: Any,
                   metadata: Any, excluded: bool, forgotten: bool, project: str = "",
                   keeps_project: bool = False) -> bool:
    """May ``caller`` be shown this entry of *another* session (recall, search across the
    user's sessions)? ``project`` / ``keeps_project``: that session's."""
    return (caller.owns(user_id, tenant_id) and recalls(session_recall)
            and not is_private(metadata) and not excluded and not forgotten
            and same_project(caller, project, keeps_project))
