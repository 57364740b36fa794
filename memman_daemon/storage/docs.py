"""The documents table group's interface: ``docs`` (a document's metadata), ``doc_chunks``
(the chunks searched, with their full-text index) and ``chunk_vectors`` (one vector per chunk,
with the model that made it). ``storage/sqlite/docs.py`` and ``storage/postgres/docs.py``
implement it; ``tiers/docs.py`` (``BusinessDocs``) is written once over it.

Writes are returned as operations for ``Storage.write`` (so a removal commits with its audit
row, agent.md's content with its document); reads are async. A new document's row is a plain
insert: another writer that added the same ``doc_id`` first makes the commit raise
``ConstraintError`` (the caller reads again and replaces). Replacing a document deletes every
chunk it has at commit time (not only those read before), so two writers replacing one
document leave the chunks of one of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class Doc:
    """A business document of one tenant."""

    pk: int
    tenant_id: str
    doc_id: str
    title: str
    source: str  #: where it came from (a path for agent.md, a URL, "upload", "promotion")
    hash: str  #: sha256 of the content; re-adding the same content changes nothing
    chunks: int
    tokens: int  #: tokens of the whole document
    bytes: int
    created_at: float
    updated_at: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    def data(self) -> dict[str, Any]:
        """What the ``data`` column holds (every field but the key)."""
        return {k: v for k, v in self.to_wire().items() if k != "pk"}


@dataclass(frozen=True)
class NewChunk:
    """A chunk to store: its id (from ``new_chunk_ids``), place and text."""

    id: int
    seq: int
    tokens: int
    text: str


#: a chunk read back: ``(chunk_id, doc pk, seq, text)``
ChunkRow = tuple[int, int, int, str]
#: a full-text match: ``(chunk_id, doc pk, seq, text, score)``, a higher score better
Match = tuple[int, int, int, str, float]


class VectorRanking(Protocol):
    """How a group's vectors are ranked (stats): ``backend`` names it."""

    @property
    def backend(self) -> str: ...

    def open(self) -> None: ...

    def close(self) -> None: ...


class DocsStore(Protocol):
    """Documents, chunks and chunk vectors of every tenant."""

    @property
    def vectors(self) -> VectorRanking: ...

    async def load(self) -> None:
        """Ready to hand out ids (the SQLite file: after the highest in use)."""

    async def new_doc_id(self) -> int: ...

    async def new_chunk_ids(self, n: int) -> list[int]: ...

    async def get(self, tenant_id: str, doc_id: str) -> Doc | None: ...

    async def of_chunk(self, tenant_id: str, chunk_id: int) -> Doc | None:
        """The document a chunk of this tenant belongs to."""

    async def of_tenant(self, tenant_id: str) -> list[Doc]:
        """The tenant's documents, oldest first."""

    async def counts(self) -> dict[str, int]:
        """``{tenants, documents, chunks}`` over every tenant."""

    def upsert_ops(self, d: Doc, chunks: list[NewChunk], vecs: np.ndarray | None, model: str,
                   replacing: bool) -> list[Any]:
        """Store ``d`` with ``chunks`` (and their vectors of ``model``), replacing every chunk
        it had when ``replacing``; a new document otherwise."""

    def delete_ops(self, d: Doc) -> list[Any]:
        """The document with its chunks and vectors."""

    async def chunk_ids(self, pk: int) -> list[int]: ...

    async def chunks(self, ids: list[int]) -> list[ChunkRow]: ...

    async def full_text(self, tenant_id: str, query: str, limit: int, at_least: int,
                        max_scan: int) -> list[Match]:
        """The tenant's best ``limit`` chunks for ``query``. Words common everywhere may limit
        the ranking to the newest ``max_scan`` matches, unless that leaves fewer than
        ``at_least``."""

    async def nearest(self, tenant_id: str, vec: np.ndarray, model: str,
                      k: int) -> list[tuple[int, float]] | None:
        """``(chunk_id, cosine)`` of the ``k`` nearest chunks where the database ranks
        vectors; None where the daemon does (``scope_vectors`` into a matrix)."""

    async def scope_vectors(self, tenant_id: str, model: str,
                            dim: int) -> tuple[list[int], np.ndarray]:
        """The tenant's chunk vectors of ``model``: ids and a matrix."""

    async def count_backlog(self, model: str) -> int:
        """Chunks with no vector of ``model``."""

    async def backlog(self, after: int, model: str, limit: int) -> list[tuple[int, str, str]]:
        """``(chunk_id, tenant_id, text)`` after id ``after`` with no vector of ``model``."""

    def late_vector_ops(self, ids: list[int], vecs: np.ndarray, model: str) -> list[Any]:
        """Vectors made in the background: each stored only while its chunk exists."""
