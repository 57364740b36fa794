"""What the two searchable tiers, user memory (``memory/``) and business documents
(``docs.py``), share: the parts they are built with, and the vectors of their rows — the
matrices loaded per scope (``vscopes``: a user's layer, a tenant's chunks) and the rows the
background re-embed is filling in."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from memman_daemon.component import Component
from memman_daemon.search.vector_matrix import VectorScopes

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.search.reembed import VectorSync
    from memman_daemon.storage.sqlite.store import Store
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tokens import TokenCounter


class SearchableTier(Component):
    """A tier searched by words and by meaning; subclasses read a scope's vectors
    (``_load_scope``)."""

    def __init__(self, config: Config, clock: Clock, store: Store, events: EventBus,
                 tokens: TokenCounter, embedder: Embedder, vector_sync: VectorSync,
                 audit: Recorder) -> None:
        self.config = config
        self.clock = clock
        self.store = store
        self.events = events
        self.tokens = tokens
        self.embedder = embedder
        self.vector_sync = vector_sync  #: asked for a pass when rows were stored without vectors
        self.audit = audit  #: where changes are audited (the shared audit with PostgreSQL)
        #: scope -> in-memory matrix of its rows' vectors (the model in force only)
        self.vscopes = VectorScopes(self._load_scope)
        #: row id -> its scope, for rows handed to the background re-embed
        self._backlog_scope: dict[int, Any] = {}
        self.searches = 0

    async def _load_scope(self, key: Hashable) -> tuple[list[int], Any]:
        raise NotImplementedError
