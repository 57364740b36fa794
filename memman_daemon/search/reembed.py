"""Background (re-)embedding: every searchable row gets a vector of the model in force.

A row needs a vector when it has none (stored while embeddings were off or failing, or a
document chunk) or has one made by another model (``[embeddings] provider``, ``model`` or
``dim`` changed). The worker walks such rows in id order, ``batch_size`` at a time, embeds
each batch off the event loop and writes it through the normal writer; meanwhile search keeps
working (FTS5 for every row, vectors for the rows already done: a query vector is only ever
compared with vectors of its own model). Progress (``state``, ``done`` of ``total``, texts/s)
is in ``memman_stats`` under ``embeddings.reembed`` and in ``memman status``.

A pass starts when the daemon starts, when the model in force changes (checked every
``CHECK_S`` seconds and before each search, so a config reload is followed), and when asked
(``wake()``). The sources are components with ``vector_backlog(after_id, model_id, limit) ->
[(id, text)]``, ``count_vector_backlog(model_id) -> int`` and ``async store_vectors(ids,
vecs, model_id)``: user memory and business documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from memman.config import Config
from memman_daemon.component import Component, stop_task
from memman_daemon.events import EventBus

if TYPE_CHECKING:
    import numpy as np

    from memman_daemon.search.embeddings import Embedder

log = logging.getLogger(__name__)

CHECK_S = 2.0


class VectorSource(Protocol):
    """A component whose rows are searched by vector (user memory, business documents)."""

    async def count_vector_backlog(self, model_id: str) -> int: ...

    async def vector_backlog(self, after: int, model_id: str,
                             limit: int) -> list[tuple[int, str]]: ...

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None: ...


class VectorSync(Component):
    """The background worker that gives every row of ``sources`` a vector of the model in
    force."""

    stats_key = "vector_sync"

    def __init__(self, config: Config, events: EventBus, embedder: Embedder, *,
                 read_only: bool = False) -> None:
        self.config = config
        self.events = events
        self.embedder = embedder
        self.read_only = read_only
        #: set by the app once they exist: the components whose rows need vectors
        self.sources: list[VectorSource] = []
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.state = "idle"  #: idle, running, off
        self.model_id = ""
        self.total = 0
        self.done = 0
        self.passes = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.last_error: str | None = None

    async def load(self) -> None:
        if self.read_only:
            return
        self._task = asyncio.create_task(self._run(), name="memman-reembed")
        self._wake.set()

    async def close(self) -> None:
        await stop_task(self._task)
        self._task = None

    def wake(self) -> None:
        self._wake.set()

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

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), CHECK_S)
            self._wake.clear()
            self.embedder.check_config()
            emb = self.embedder
            if not emb.enabled or not self.config.embeddings.reembed:
                self.state = "off"
                continue
            if self.state == "idle" and self.model_id == emb.model_id and not self._pending:
                continue
            try:
                await self._pass()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the daemon serving; try again at the next wake
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.state = "idle"
                log.exception("re-embedding failed")

    _pending = True  #: a pass is due (set by ``request``); the first pass always runs

    def request(self) -> None:
        """A pass is due (new rows without vectors, or the model changed)."""
        self._pending = True
        self._wake.set()

    async def _pass(self) -> None:
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
            self.state = "idle"
            return
        self.state = "running"
        self.passes += 1
        self.started_at, self.finished_at = time.time(), None
        self.done, self.total = 0, backlog
        self.events.publish("stats", "reembed_started", self.progress())
        batch = max(1, self.config.embeddings.batch_size)
        for src in self.sources:
            after = 0
            while True:
                if emb.check_config() or emb.model_id != model_id:
                    self._pending = True  # the model changed mid-pass: start over
                    self.state = "idle"
                    return
                rows = await src.vector_backlog(after, model_id, batch)
                if not rows:
                    break
                after = rows[-1][0]
                vecs = await emb.embed([t for _, t in rows])
                if vecs is None:
                    self.last_error = "the embedder returned no vectors"
                    self.state = "idle"
                    return
                if emb.model_id != model_id:
                    continue
                await src.store_vectors([i for i, _ in rows], vecs, model_id)
                self.done += len(rows)
                self.total = max(self.total, self.done)
                await asyncio.sleep(0)
        self.state = "idle"
        self.finished_at = time.time()
        self.events.publish("stats", "reembed_finished", self.progress())
