"""Background (re-)embedding: every searchable row gets a vector of the model in force.

A row needs a vector when it has none (stored while embeddings were off or failing, or a
document chunk) or has one made by another model (``[embeddings] provider``, ``model`` or
``dim`` changed). ``VectorSync`` walks such rows in id order, ``batch_size`` at a time, as a
source of the daemon's one embedding queue (``embed_queue.py``: a batch at its turn), embeds
each batch off the event loop and writes it through the normal writer; meanwhile search keeps
working (FTS5 for every row, vectors for the rows already done: a query vector is only ever
compared with vectors of its own model). Progress (``state``, ``done`` of ``total``, texts/s)
is in ``memman_stats`` under ``embeddings.reembed`` and in ``memman status``.

A pass starts when the daemon starts, when the model in force changes (checked at each of
the queue's turns, at least every ``IDLE_CHECK_S`` seconds, and before each search, so a config reload is followed), and when asked
(``wake()``). The sources are components with ``vector_backlog(after_id, model_id, limit) ->
[(id, text)]``, ``count_vector_backlog(model_id) -> int`` and ``async store_vectors(ids,
vecs, model_id)``: user memory and business documents.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from memman.config import Config
from memman_daemon.component import Component
from memman_daemon.events import EventBus

if TYPE_CHECKING:
    import numpy as np

    from memman_daemon.search.embed_queue import EmbeddingQueue
    from memman_daemon.search.embeddings import Embedder

log = logging.getLogger(__name__)



class VectorSource(Protocol):
    """A component whose rows are searched by vector (user memory, business documents)."""

    async def count_vector_backlog(self, model_id: str) -> int: ...

    async def vector_backlog(self, after: int, model_id: str,
                             limit: int) -> list[tuple[int, str]]: ...

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None: ...


class VectorSync(Component):
    """Gives every row of ``sources`` a vector of the model in force, a batch at each of its
    turns in the embedding queue."""

    stats_key = "vector_sync"

    name = "vector_sync"  #: as a source of the embedding queue

    def __init__(self, config: Config, events: EventBus, embedder: Embedder,
                 queue: EmbeddingQueue, *, read_only: bool = False) -> None:
        self.config = config
        self.events = events
        self.embedder = embedder
        self.read_only = read_only
        #: set by the app once they exist: the components whose rows need vectors
        self.sources: list[VectorSource] = []
        #: the daemon's one background embedder, which runs this worker's batches
        self.queue = queue
        if not read_only:
            queue.register(self)
        #: where the pass under way is: (source number, last id done); None between passes
        self._at: tuple[int, int] | None = None
        self.state = "idle"  #: idle, running, off
        self.model_id = ""
        self.total = 0
        self.done = 0
        self.passes = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.last_error: str | None = None

    def wake(self) -> None:
        self.queue.wake()

    def stats(self) -> dict[str, Any]:
        return self.progress()

    def progress(self) -> dict[str, Any]:
        now = time.time()
        elapsed = ((self.finished_at or now) - self.started_at) if self.started_at else 0.0
        return {"state": self.state, "model_id": self.model_id, "done": self.done,
                "total": self.total, "passes": self.passes,
                "rate_per_s": round(self.done / elapsed, 1) if elapsed > 0 else None,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "last_error": self.last_error}

    def waiting(self) -> int:
        return max(self.total - self.done, 0) if self._at is not None else 0

    async def embed_next(self) -> bool:
        """The next batch of the pass under way, or a pass started when one is due (the
        model in force changed, rows arrived without vectors, the daemon started)."""
        try:
            return await self._step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep the daemon serving; try again at the next wake
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.state, self._at = "idle", None
            log.exception("re-embedding failed")
            return False

    def request(self) -> None:
        """A pass is due (new rows without vectors, or the model changed)."""
        self._pending = True
        self.queue.wake()

    async def _step(self) -> bool:
        emb = self.embedder
        changed = emb.check_config()
        if not emb.enabled or not self.config.embeddings.reembed:
            self.state, self._at = "off", None
            return False
        if self._at is None or changed or emb.model_id != self.model_id:
            if self.state == "idle" and self.model_id == emb.model_id and not self._pending:
                return False
            if not await self._start():
                return False
        model_id = self.model_id
        assert self._at is not None
        src_no, after = self._at
        while src_no < len(self.sources):
            src = self.sources[src_no]
            rows = await src.vector_backlog(after, model_id, max(1, self.config.embeddings.batch_size))
            if not rows:
                src_no, after = src_no + 1, 0
                continue
            vecs = await emb.embed([t for _, t in rows])
            if vecs is None:
                self.last_error = "the embedder returned no vectors"
                self.state, self._at = "idle", None
                return False
            if emb.model_id != model_id:  # the model changed meanwhile: a new pass
                self._pending, self.state, self._at = True, "idle", None
                return True
            await src.store_vectors([i for i, _ in rows], vecs, model_id)
            self.done += len(rows)
            self.total = max(self.total, self.done)
            self._at = (src_no, rows[-1][0])
            return True
        self.state, self._at = "idle", None
        self.finished_at = time.time()
        self.events.publish("stats", "reembed_finished", self.progress())
        return False

    async def _start(self) -> bool:
        """A pass: counts the rows without a vector of the model in force; False when none."""
        emb = self.embedder
        model_id = emb.model_id
        self._pending = False
        backlog = 0
        for src in self.sources:
            backlog += await src.count_vector_backlog(model_id)
        if model_id != self.model_id:
            self.done = 0
            self.total = 0
        self.model_id = model_id
        if backlog == 0:
            self.state, self._at = "idle", None
            return False
        self.state = "running"
        self.passes += 1
        self.started_at, self.finished_at = time.time(), None
        self.done, self.total = 0, backlog
        self._at = (0, 0)
        self.events.publish("stats", "reembed_started", self.progress())
        return True
