"""The agent.md group's interface: the content of each tenant's agent.md kept beside the
files (``AgentMdRow``). ``tiers/agentmd.py`` (``AgentMd``) keeps each host's file in line with
it, written once over this interface.

In PostgreSQL (``storage/postgres/agentmd.py``) the row is the shared truth every host's file
follows. In the local SQLite file (``storage/sqlite/agentmd.py``) the file is the only copy:
the row read back is the ``agent.md`` document's hash and time with no ``content``, and
writes are nothing more than the document's own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

DOC_ID = "agent.md"  #: the tenant's document made from its agent.md


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class AgentMdRow:
    content: str | None  #: None: no copy beside the file (the file is the record)
    hash: str  #: sha256 of the content
    updated_at: float  #: unix seconds (wall clock: compared with a file's mtime)
    version: int  #: counts the writes; an edit names the one it read


class AgentMdStore(Protocol):
    async def get(self, tenant_id: str) -> AgentMdRow | None: ...

    async def tenants(self) -> list[str]:
        """The tenants with a copy (each host's file is made from it)."""

    def put_ops(self, tenant_id: str, text: str, at: float, read: AgentMdRow | None,
                force: bool) -> list[Any]:
        """Store ``text``. ``read`` is the row the edit was made from: the commit raises
        ``ConstraintError`` if another writer changed (or first wrote) it meanwhile, unless
        ``force`` (an import: the file on disk is the newest write)."""

    def delete_ops(self, tenant_id: str) -> list[Any]: ...
