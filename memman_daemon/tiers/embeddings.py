"""Embeddings through the ``openai`` client (default model text-embedding-3-small).

Enabled only when ``[llm] embeddings_base_url`` is set; without it memman ranks with FTS5 alone.
A failed or timed-out call is logged and counted, and the caller goes on without vectors (the
text is still stored and found by FTS) — an embeddings outage never fails a write.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memman_daemon.core import Core

log = logging.getLogger(__name__)


class Embedder:
    stats_key = "embeddings"

    def __init__(self, core: Core) -> None:
        self.core = core
        cfg = core.config.llm
        self.model = cfg.embeddings_model
        self.enabled = bool(cfg.embeddings_base_url)
        self._client: Any = None
        self.calls = 0
        self.failures = 0
        self.tokens = 0

    def _get_client(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI
            cfg = self.core.config.llm
            self._client = AsyncOpenAI(
                base_url=cfg.embeddings_base_url,
                api_key=os.environ.get(cfg.api_key_env) or "memman-no-key",
                timeout=cfg.timeout_s, max_retries=cfg.max_retries)
        return self._client

    async def embed(self, texts: list[str]) -> list[list[float]] | None:
        """One vector per text, or None when embeddings are off or the call failed."""
        if not self.enabled or not texts:
            return None
        self.calls += 1
        try:
            resp = await self._get_client().embeddings.create(model=self.model, input=texts)
        except Exception as exc:  # network, HTTP status, timeout, bad JSON: go on without
            self.failures += 1
            log.warning("embeddings call to %s failed (%s: %s); storing without vectors",
                        self.core.config.llm.embeddings_base_url, type(exc).__name__, exc)
            return None
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(texts):
            self.failures += 1
            log.warning("embeddings endpoint returned %d vectors for %d texts", len(data), len(texts))
            return None
        usage = getattr(resp, "usage", None)
        self.tokens += getattr(usage, "total_tokens", 0) or 0
        return [list(map(float, d.embedding)) for d in data]

    async def load(self) -> None:
        pass

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def stats(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "model": self.model, "calls": self.calls,
                "failures": self.failures, "tokens": self.tokens}
