"""The wiring: builds every part of the daemon once, with explicit constructor arguments,
in load order; starts them (``start``: the store, the session log, then each component's
``load``), stops them in reverse, and answers ``memman_stats`` from their figures.

The server (server.py) owns the socket and hands each request to a method with a ``Call``
whose ``app`` is this object; a method takes the parts it needs from it."""

from __future__ import annotations

import logging
import time
from typing import Any

from memman import __version__
from memman.config import DEFAULT_MODEL, Config
from memman_daemon.background import BackgroundShare
from memman_daemon.changes import Owner
from memman_daemon.clock import Clock
from memman_daemon.component import Component
from memman_daemon.config_watch import ConfigWatcher
from memman_daemon.engine.session_engine import SessionEngine
from memman_daemon.engine.usage_series import UsageSeries
from memman_daemon.llm.summarizer import Summarizer
from memman_daemon.model import Session
from memman_daemon.recall.index import RecallIndex
from memman_daemon.scope import session_owner
from memman_daemon.search.embed_queue import EmbeddingQueue
from memman_daemon.search.embeddings import Embedder
from memman_daemon.search.reembed import VectorSync
from memman_daemon.sessions import LoadError, Sessions
from memman_daemon.shared_store import audit_logs, connect
from memman_daemon.storage import backend_for
from memman_daemon.storage.sqlite.store import Store, StoreError
from memman_daemon.tiers.agentmd import AgentMd
from memman_daemon.tiers.cache import ToolCache
from memman_daemon.tiers.docs import BusinessDocs
from memman_daemon.tiers.injection import Injection
from memman_daemon.tiers.memory import UserMemory
from memman_daemon.tiers.promotion import Promotion
from memman_daemon.tiers.scratchpad import Scratchpad
from memman_daemon.tokens import TokenCounter
from memman_daemon.undo import Undo

log = logging.getLogger(__name__)


class App:
    """The daemon's parts, built once with explicit arguments, in load order.

    Each part gets exactly the parts it uses as constructor arguments; the order below is the
    order of their dependencies. Where two parts need each other (the embedder and the
    background re-embed, the re-embed and the tiers it fills, agent.md and the documents with
    PostgreSQL), the later one is handed to the earlier one by a named hook set here, after
    both exist.
    """

    def __init__(self, config: Config, clock: Clock | None = None, *, read_only: bool = False) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.read_only = read_only
        self.started_at = time.time()
        self.store = Store(config.database_path, config.storage.synchronous,
                           config.storage.batch_max_rows)
        # where user memory, business context and their audit live: SQLite or PostgreSQL
        self.storage = backend_for(config, self.store, read_only=read_only)
        self.shared = self.storage.store
        self.events = self.storage.events
        self.tokens = TokenCounter()
        # vectors for hybrid search, near-duplicates and relevance: local model, endpoint or
        # none. `await embedder.embed(texts)` / `embedder.cached(texts)` give unit vectors
        # background work (compression's analysis, the embedding prefetch) shares one time
        # budget while clients are served; the server tells it when requests come in
        self.background = BackgroundShare(lambda: config.limits.background_share)
        # the one background embedder: the recall index, stored rows without vectors
        # (VectorSync) and the relevance prefetch are its sources, a batch each in turn
        self.embed_queue = EmbeddingQueue()
        self.embedder = Embedder(config, self.background, self.embed_queue)
        self.sessions = Sessions(self.store, config, self.clock, self.events, self.tokens,
                                 self.embedder, read_only=read_only)
        self.summarizer = Summarizer(config, self.tokens)  # the LLM client and its fallback
        # promotions and evictions, readable over the protocol
        #: with PostgreSQL also ``separate_audit``: where shared-tier changes are audited
        self.audit, self.separate_audit = audit_logs(self.storage, self.clock)
        #: where changes to shared tiers are audited (the audit itself with SQLite)
        self.shared_audit = self.separate_audit or self.audit
        self.cache = ToolCache(config=config, clock=self.clock, store=self.store,
                               events=self.events, sessions=self.sessions, audit=self.audit,
                               read_only=read_only)
        # every entry of a user's sessions, indexed as it arrives: the one retriever the
        # window and memory search share, across sessions
        self.recall = RecallIndex(config=config, storage=self.storage.recall, embedder=self.embedder,
                                  queue=self.embed_queue, background=self.background,
                                  sessions=self.sessions)
        # cycles, compression, the budgeted context
        self.engine = SessionEngine(config=config, clock=self.clock, events=self.events, tokens=self.tokens,
                                    sessions=self.sessions, summarizer=self.summarizer,
                                    embedder=self.embedder, audit=self.audit, cache=self.cache,
                                    background=self.background, recall=self.recall)
        # background (re-)embedding of stored rows; its sources are set below
        self.vector_sync = VectorSync(config, self.events, self.embedder, self.embed_queue,
                                      read_only=read_only)
        self.injection = Injection(config, self.events, self.sessions, self.cache)
        self.scratchpad = Scratchpad(config, self.clock, self.store, self.events, self.sessions,
                                     self.embedder, self.audit, read_only=read_only)
        self.summarizer.notes = self.scratchpad.snippets  # summaries quote the agent's notes
        self.user_memory = UserMemory(config, self.clock, self.storage, self.events, self.tokens,
                                      self.embedder, self.vector_sync, self.shared_audit,
                                      self.sessions, self.scratchpad, read_only=read_only)
        self.docs = BusinessDocs(config, self.clock, self.storage, self.events, self.tokens,
                                      self.embedder, self.vector_sync, self.shared_audit)
        # watches each tenant's agent.md
        self.agent_md = AgentMd(config, self.events, self.docs, self.storage,
                                              self.shared_audit, read_only=read_only)
        self.promotion = Promotion(config, self.events, self.sessions, self.scratchpad,
                                   self.user_memory, self.agent_md, audit=self.shared_audit,
                                   storage=self.storage)
        # memman_undo: reverses a client's last change through the part that owns it
        self.undo = Undo(store=self.store, audit=self.audit, separate_audit=self.separate_audit,
                         clock=self.clock, sessions=self.sessions, engine=self.engine,
                         recall=self.recall, scratchpad=self.scratchpad, cache=self.cache,
                         user_memory=self.user_memory, agent_md=self.agent_md)
        # sent / history tokens over time (the TUI's chart)
        self.series = UsageSeries(config=config, clock=self.clock, store=self.store,
                                  events=self.events, sessions=self.sessions, engine=self.engine)
        # the hooks between parts built above
        self.vector_sync.sources = [self.user_memory, self.docs]
        self.embedder.on_model_changed = [self.user_memory.vscopes.reset,
                                          self.docs.vscopes.reset, self.vector_sync.request,
                                          self.recall.model_changed]
        self.sessions.on_appended = [self.recall.appended, self.engine.timelines.appended]
        self.engine.timelines.yield_to = self.recall.indexing
        self.engine.builder.learned = self.user_memory.bearing_on
        self.engine.builder.repeats.state = self._read_state
        self.events.owner_of = self._owner_of
        self.sessions.on_reset = [self.recall.session_gone, self.engine.builder.repeats.forget]
        self.sessions.on_recall_changed = [self.recall.recall_changed]
        self.embedder.reembed_progress = self.vector_sync.progress
        # what a deleted session takes along with it, in this order
        self.sessions.on_deleted = [self.cache.on_session_deleted,
                                    self.scratchpad.on_session_deleted,
                                    self.series.on_session_deleted]
        connect(self.storage, self.user_memory, self.docs, self.agent_md)
        # the parts with state to load, tasks to stop or figures to report (component.py):
        # loaded after the sessions, in this order; closed in reverse
        self.components: list[Component] = [
            self.background, self.summarizer, self.engine, self.shared, self.audit, self.embedder,
            self.recall, self.cache,
            self.scratchpad, self.user_memory, self.docs, self.agent_md, self.vector_sync,
            self.series, self.embed_queue]  # the queue after its sources, closed before them
        if self.shared_audit is not self.audit:
            self.components.insert(self.components.index(self.audit) + 1, self.shared_audit)
        self.config_watch = ConfigWatcher(config, self.events)

    def _read_state(self, s: Session) -> tuple[Any, ...] | None:
        """What a context answer of ``s`` was built from, as the components' counters for
        the session's owner (``changes.py``: another user's changes leave them as they are;
        an answer is sent again only while they are the same: ``engine/window/repeats.py``);
        None while the timelines' follower (for this owner) or the recall index's start has
        work left."""
        owner = session_owner(s)
        timelines, recall = self.engine.timelines.state(owner), self.recall.state(s)
        if timelines is None or recall is None:
            return None
        return (owner, *self.sessions.changes.of(owner), *timelines, *recall,
                *self.events.changes.of(owner))

    def _owner_of(self, session_id: str) -> Owner | None:
        s = self.sessions.by_id.get(session_id)
        return None if s is None else session_owner(s)

    async def start(self) -> None:
        await self.store.open()
        try:
            await self._load()
        except Exception:
            await self.store.checked()  # a damaged file says so first (it may be the cause)
            raise
        await self.store.checked()  # the start ends only on a file that passed its check
        self.tokens.encoding(DEFAULT_MODEL)  # resolved before serving (the server does it first)
        await self.config_watch.start()

    async def _load(self) -> None:
        if await self.sessions.any_entries():
            self.recall.warm()  # the local models load while the session log is read
        await self.sessions.load()
        for c in self.components:
            try:
                await c.load()
            except (LoadError, StoreError):
                raise
            except Exception as exc:  # a damaged row of that component's tables
                raise LoadError(
                    f"cannot load {self.store.path}: the {c.stats_key or type(c).__name__}"
                    f" data is damaged ({type(exc).__name__}: {exc}). Nothing was changed. Move "
                    "the file aside (the daemon then starts empty) and restore it from a backup, "
                    "or delete the damaged rows with the sqlite3 shell; docs/operations.md (\"A "
                    "damaged database\") has the steps") from exc

    async def stop(self) -> None:
        await self.config_watch.close()
        for c in reversed(self.components):
            try:
                await c.close()
            except Exception:  # keep closing the rest; the store must still commit
                log.exception("closing %s failed", type(c).__name__)
        await self.store.close()

    def stats(self, server: dict[str, int]) -> dict[str, Any]:
        """memman_stats: ``server`` is the server's counters (clients, requests, errors)."""
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
            **server,
            "sessions": len(self.sessions.by_id),
            "entries": sum(len(s.entries) for s in self.sessions.by_id.values()),
            "events_published": self.events.published,
            "subscriptions": len(self.events.subscriptions),
            "store": {"commits": self.store.commits, "rows_written": self.store.rows_written,
                      "write_errors": self.store.write_errors,
                      "synchronous": self.store.synchronous,
                      "checkpoints": self.store.checkpoints},
            "tokenizer": {"encoding": self.tokens.encoding_name(DEFAULT_MODEL),
                          "default_model": DEFAULT_MODEL, **self.tokens.status()},
            "read_only": self.read_only,
            "config": self.config_watch.stats(),
        }
        for c in self.components:
            if c.stats_key:
                out[c.stats_key] = c.stats()
        return out
