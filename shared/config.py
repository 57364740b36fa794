"""memman configuration: plain dataclasses loaded once from TOML, then only read.

Every number the seeds name is a default here, never a constant in code. A section of the
TOML file maps to a dataclass below (``[limits]`` -> ``LimitsConfig``); unknown keys are an
error that names the key, so typos do not pass silently. ``MEMMAN_<SECTION>_<KEY>`` environment
variables override single values (e.g. ``MEMMAN_LIMITS_MAX_CLIENTS=64``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memman import paths


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


@dataclass
class StorageConfig:
    synchronous: str = "NORMAL"  #: SQLite synchronous pragma: NORMAL or FULL
    database: str = "memman.db"  #: file name inside the data dir (or an absolute path)
    batch_max_rows: int = 5000  #: most queued writes committed in one transaction


@dataclass
class ScoringConfig:
    """Seed 001 section 4: importance score weights and rules."""

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


@dataclass
class ContextConfig:
    """Seed 001: the budgeted context window."""

    max_tokens: int = 8000  #: default budget (tokens) when a session names none
    warn_threshold: float = 0.6
    prune_threshold: float = 0.8
    aggressive_threshold: float = 0.9
    target_usage: float = 0.7  #: selection fills this share of the budget
    min_gap_for_summary: int = 5  #: dropped runs this long (entries) are summarized
    llm_deadline_s: float = 0.25  #: longest a context request waits for a gap summary
    keep_system_prompts: bool = True  #: system-role message entries always stay, like pinned ones
    gap_role: str = "assistant"  #: role of gap summaries and omission markers (seed 001)
    gap_summary_max_tokens: int = 150  #: cap on one gap summary (tokens of its text)
    emergency_gap_summaries: bool = True  #: over 100 %: fallback summaries (no LLM) vs markers only
    include_rolling_summary: bool = True  #: seed 000 rolling summary as a system message
    usage_history: int = 100  #: reported usage records kept per session
    max_gap_llm_calls: int = 4  #: gap summaries one context request asks the LLM for


@dataclass
class CompressionConfig:
    """Seed 004: compression of the entry log into linked summaries."""

    auto_compress: bool = True
    max_tokens: int = 50_000  #: active tokens that trigger compression
    max_entries: int = 100  #: active entries that trigger compression
    recent_window: int = 10  #: newest entries never compressed
    min_entries: int = 5  #: fewest entries compressed at once
    ratio: float = 0.3  #: target summary size as a share of the original tokens
    keep_pinned: bool = True  #: pinned entries and system prompts are never compressed
    llm_deadline_s: float = 0.5  #: longest memman_session_compact waits for the LLM summary
    check_interval_s: float = 1.0  #: how often sessions are checked against the limits (seconds)


@dataclass
class CycleConfig:
    """Seed 000: Q&A cycles, exchanges and the rolling summary."""

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
    model: str = "gpt-4o-mini"
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
    """Seed 000: the per-session tool-result cache and the one-time context injection."""

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


@dataclass
class MemoryConfig:
    max_working_entries: int = 50
    search_limit: int = 10
    recency_bonus: float = 0.5  #: seed 003: up to this much for entries from the last day
    recency_window_s: float = 86_400.0
    candidates: int = 100  #: FTS / vector candidates fetched before recency and fusion re-sort them
    lexical_weight: float = 0.5  #: hybrid ranking: share of the normalized BM25 score
    semantic_weight: float = 0.5  #: hybrid ranking: share of the cosine similarity
    compact_keep_last: int = 10  #: entries compaction keeps live
    max_scan: int = 10_000  #: a query matching more entries ranks only the newest this many


@dataclass
class DocsConfig:
    chunk_tokens: int = 256
    chunk_overlap: int = 32
    candidates: int = 100
    top_k: int = 10
    agent_md: str = ""  #: path template; "{tenant}" is replaced; empty = <data>/tenants/{tenant}/agent.md
    max_chunks_per_doc: int = 3  #: rerank keeps at most this many chunks of one document
    max_scan: int = 5_000  #: a query matching more chunks ranks only the newest this many
    watch: bool = True  #: watch agent.md files and re-ingest on change
    watch_debounce_ms: int = 50  #: watchfiles debounce (milliseconds)


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
    tui: TuiConfig = field(default_factory=TuiConfig)

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
    ) -> Config:
        """Read the TOML file (if present), environment overrides, then explicit arguments."""
        path = paths.config_path(config_file)
        raw: dict[str, Any] = {}
        if path.exists():
            try:
                raw = tomllib.loads(path.read_text())
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"config file {path} is not valid TOML: {exc}") from exc
        cfg = cls(config_file=path)  # the file consulted (it may not exist yet)
        top_socket = raw.pop("socket", None)
        top_data = raw.pop("data_dir", None)
        for section, values in {**raw, **(overrides or {})}.items():
            _apply_section(cfg, section, values, source=str(path))
        _apply_env(cfg)
        cfg.socket = paths.socket_path(socket or top_socket)[0]
        cfg.data_dir = paths.data_dir(data_dir or top_data)
        return cfg


def _apply_section(cfg: Config, section: str, values: Any, source: str) -> None:
    sub = getattr(cfg, section, None)
    if sub is None or not dataclasses.is_dataclass(sub) or not isinstance(values, dict):
        raise ValueError(f"{source}: unknown config section [{section}]")
    names = {f.name for f in dataclasses.fields(sub)}
    for key, value in values.items():
        if key not in names:
            raise ValueError(
                f"{source}: unknown key '{key}' in [{section}]; known keys: {', '.join(sorted(names))}"
            )
        setattr(sub, key, value)


def _apply_env(cfg: Config) -> None:
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        if not dataclasses.is_dataclass(sub):
            continue
        for sf in dataclasses.fields(sub):
            var = f"MEMMAN_{f.name}_{sf.name}".upper()
            if var in os.environ:
                current = getattr(sub, sf.name)
                setattr(sub, sf.name, _coerce(os.environ[var], current, var))


def _coerce(text: str, current: Any, var: str) -> Any:
    try:
        if isinstance(current, bool):
            return text.lower() in ("1", "true", "yes", "on")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
    except ValueError as exc:
        raise ValueError(f"{var}={text!r} is not a valid {type(current).__name__}") from exc
    if isinstance(current, list):
        return [s.strip() for s in text.split(",") if s.strip()]
    return text
