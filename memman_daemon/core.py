"""Core: everything the daemon knows, independent of sockets.

The server (server.py) owns connections and hands each request to a handler with a ``Call``
whose ``core`` is this object. Components are created here, loaded from SQLite in ``start()``
in the order listed, and closed in ``stop()``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from memman import __version__
from memman.config import Config
from memman_daemon.clock import Clock
from memman_daemon.config_watch import ConfigWatcher
from memman_daemon.engine.session_engine import SessionEngine
from memman_daemon.engine.summarizer import Summarizer
from memman_daemon.engine.usage_series import UsageSeries
from memman_daemon.sessions import LoadError, Sessions
from memman_daemon.shared_store import backend_for, wire
from memman_daemon.store import Store, StoreError
from memman_daemon.tiers.cache import ToolCache
from memman_daemon.tiers.embeddings import Embedder
from memman_daemon.tiers.injection import Injection
from memman_daemon.tiers.promotion import Promotion
from memman_daemon.tiers.reembed import VectorSync
from memman_daemon.tiers.scratchpad import Scratchpad
from memman_daemon.tokens import TokenCounter, cache_dir_for

log = logging.getLogger(__name__)


class Core:
    def __init__(self, config: Config, clock: Clock | None = None, *, read_only: bool = False) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.read_only = read_only
        self.started_at = time.time()
        self.store = Store(config.database_path, config.storage.synchronous,
                           config.storage.batch_max_rows)
        # where user memory, business context and their audit live: SQLite or PostgreSQL
        self.backend = backend_for(config)
        self.shared = self.backend.store
        self.events = self.backend.events
        self.tokens = TokenCounter(cache_dir_for(config.data_dir))
        self.sessions = Sessions(self)
        #: filled by the server: live connection count, requests served, errors
        self.counters: dict[str, int] = {"requests": 0, "errors": 0}
        self.connections = 0
        # Components: each has `async load()` (read its state from SQLite) and may have
        # `async close()`, `stats()` with `stats_key`, and `on_session_deleted()`. Loaded after
        # the sessions, in this order; closed in reverse.
        self.summarizer = Summarizer(self)  # the engine's LLM client and fallback
        self.engine = SessionEngine(self)  # cycles, compression, budgeted context (issue 3)
        self.audit = self.backend.audit(self)  # promotions and evictions, readable over the protocol
        #: where changes to shared tiers are audited (core.audit itself with SQLite)
        self.shared_audit = (self.backend.shared_audit(self) if self.backend.shared_audit
                             else self.audit)
        # vectors for hybrid search, near-duplicates and relevance: local model, endpoint or
        # none. `await core.embedder.embed(texts)` / `core.embedder.cached(texts)` give unit
        # vectors (numpy, rows normalized) to any part of the daemon
        self.embedder = Embedder(self)
        self.cache = ToolCache(self)
        self.injection = Injection(self)
        self.scratchpad = Scratchpad(self)
        self.promotion = Promotion(self)
        self.user_memory = self.backend.user_memory(self)
        self.docs = self.backend.docs(self)
        self.agent_md = self.backend.agent_md(self)  # watches each tenant's agent.md
        self.vector_sync = VectorSync(self)  # background (re-)embedding of stored rows
        self.series = UsageSeries(self)  # sent / history tokens over time (the TUI's chart)
        self.components: list[Any] = [
            self.summarizer, self.engine, self.shared, self.audit, self.embedder, self.cache,
            self.injection, self.scratchpad, self.promotion, self.user_memory, self.docs,
            self.agent_md, self.vector_sync, self.series]
        if self.shared_audit is not self.audit:
            self.components.insert(self.components.index(self.audit) + 1, self.shared_audit)
        wire(self)
        self.config_watch = ConfigWatcher(self)

    async def start(self) -> None:
        await self.store.open()
        await self.sessions.load()
        for c in self.components:
            try:
                await c.load()
            except (LoadError, StoreError):
                raise
            except Exception as exc:  # a damaged row of that component's tables
                raise LoadError(
                    f"cannot load {self.store.path}: the {getattr(c, 'stats_key', type(c).__name__)}"
                    f" data is damaged ({type(exc).__name__}: {exc}). Nothing was changed. Move "
                    "the file aside (the daemon then starts empty) and restore it from a backup, "
                    "or delete the damaged rows with the sqlite3 shell; docs/operations.md (\"A "
                    "damaged database\") has the steps") from exc
        self.tokens.encoding("gpt-4o-mini")  # resolve the default encoding before serving
        await self.config_watch.start()

    async def stop(self) -> None:
        await self.config_watch.close()
        for c in reversed(self.components):
            close = getattr(c, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # keep closing the rest; the store must still commit
                    log.exception("closing %s failed", type(c).__name__)
        await self.store.close()

    def stats(self) -> dict[str, Any]:
        db = self.config.database_path
        size = 0
        for suffix in ("", "-wal"):
            p = db.with_name(db.name + suffix)
            if p.exists():
                size += p.stat().st_size
        out: dict[str, Any] = {
            "version": __version__,
            "pid": __import__("os").getpid(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "socket": str(self.config.socket),
            "database": str(db),
            "database_bytes": size,
            "clients": self.connections,
            "requests": self.counters["requests"],
            "errors": self.counters["errors"],
            "sessions": len(self.sessions.by_id),
            "entries": sum(len(s.entries) for s in self.sessions.by_id.values()),
            "events_published": self.events.published,
            "subscriptions": len(self.events.subscriptions),
            "store": {"commits": self.store.commits, "rows_written": self.store.rows_written,
                      "write_errors": self.store.write_errors,
                      "synchronous": self.store.synchronous},
            "tokenizer": {"encoding": self.tokens.encoding_name("gpt-4o-mini"),
                          "default_model": "gpt-4o-mini", **self.tokens.status()},
            "read_only": self.read_only,
            "config": self.config_watch.stats(),
        }
        for c in self.components:
            stats = getattr(c, "stats", None)
            if stats is not None:
                out[c.stats_key] = stats()
        return out
