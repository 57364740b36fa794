"""The one embedding queue: all of the daemon's background embedding, one batch at a time.

Three parts need texts embedded in the background: the recall index (its entries' search
vectors and token vectors), user memory and business documents (rows without a vector of the
model in force: ``reembed.VectorSync``), and the relevance prefetch of session entries
(``Embedder``'s static model). Each is an ``EmbedSource``: it knows what it still needs and
where a batch's vectors go. This queue is the one worker that runs them: it takes one batch
from each source with work in turn (round robin, so a backlog of 60,000 entries does not hold
up a memory record's vector for minutes), and never two batches at once — so the background
share, the worker threads and the memory of one batch are those of one embedder, whatever
the number of sources.

A request's own embedding (a question's vector) does not queue here: it is embedded on its
path, bounded by its excerpt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from memman_daemon.component import Component, stop_task

log = logging.getLogger(__name__)

#: the queue looks at its sources this often even when none woke it (a config reload that
#: changes the model is noticed by ``VectorSync`` at its next turn)
IDLE_CHECK_S = 2.0


class EmbedSource(Protocol):
    """A part whose texts are embedded in the background."""

    #: its name in ``memman_stats`` (``embedding_queue.sources``)
    name: str

    def waiting(self) -> int:
        """Texts it still has to embed (as far as it knows without a query)."""
        ...

    async def embed_next(self) -> bool:
        """Embed its next batch and put the vectors where they belong; False when it had
        nothing to do (the queue then moves on, and sleeps when no source had any)."""
        ...


class EmbeddingQueue(Component):
    """The daemon's one background embedder: its sources' batches, one at a time, in turn."""

    stats_key = "embedding_queue"

    def __init__(self) -> None:
        self.sources: list[EmbedSource] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches: dict[str, int] = {}  #: batches run, per source
        self.failures = 0  #: batches a source could not finish (logged)

    def register(self, source: EmbedSource) -> None:
        self.sources.append(source)
        self.batches.setdefault(source.name, 0)

    def wake(self) -> None:
        """A source has something new to embed."""
        self._wake.set()

    async def load(self) -> None:
        # loaded after its sources (the app's order): their state is there to be read
        self._task = asyncio.create_task(self._run(), name="memman-embedding-queue")
        self._wake.set()

    async def close(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):  # a turn like any other
                await asyncio.wait_for(self._wake.wait(), IDLE_CHECK_S)
            self._wake.clear()
            busy = True
            while busy:
                busy = False
                for src in list(self.sources):  # one batch each, in turn
                    try:
                        did = await src.embed_next()
                    except asyncio.CancelledError:
                        raise
                    except Exception:  # one source's failure never stops the others
                        self.failures += 1
                        log.exception("background embedding for %s failed", src.name)
                        did = False
                    if did:
                        self.batches[src.name] = self.batches.get(src.name, 0) + 1
                    busy = busy or did
                    await asyncio.sleep(0)

    def stats(self) -> dict[str, Any]:
        return {"sources": {s.name: {"waiting": s.waiting(), "batches": self.batches[s.name]}
                            for s in self.sources},
                "failures": self.failures}

