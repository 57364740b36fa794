"""Typed result shapes of the protocol: what the daemon answers, as the clients and the TUI read it.

Owns the field names of every result map (``TypedDict``; at run time they are plain dicts, as
msgpack delivers them). The generated client methods (``memman.methods``) return these types,
so a client or the terminal app that reads a field the daemon does not send is a mypy error,
not a guess. A field the daemon adds later is simply not listed here yet: readers keep using
``.get`` for fields marked ``NotRequired`` (present only in some answers).

docs/protocol.md describes each field; names here follow the result maps there.
"""

from typing import Any, NotRequired, TypedDict

# --- the daemon and its connections ------------------------------------------------------


class MethodInfo(TypedDict):
    """One method of ``memman_get_api_info``, as declared in ``memman.api``."""

    name: str
    params: list[str]  #: the parameter names, in order
    writes: bool
    signature: str  #: the parameters as Python writes them: ``session_id: str, opts: dict = {}``
    returns: str  #: the result shape (a name in ``memman.types``, or a builtin)
    doc: str  #: the first paragraph of the method's doc


class ApiInfo(TypedDict):
    """``memman_get_api_info``."""

    api_level: int
    version: str
    methods: list[MethodInfo]
    events: list[str]
    topics: list[str]


class Stats(TypedDict, total=False):
    """``memman_stats``: counters of the daemon and of each part (each part a map of counters)."""

    version: str
    pid: int
    uptime_s: float
    socket: str
    database: str
    database_bytes: int
    clients: int
    requests: int
    errors: int
    sessions: int
    entries: int
    events_published: int
    subscriptions: int
    read_only: bool
    store: dict[str, Any]
    tokenizer: dict[str, Any]
    config: dict[str, Any]
    summarizer: dict[str, Any]
    session_engine: dict[str, Any]
    audit: dict[str, Any]
    embeddings: dict[str, Any]
    cache: dict[str, Any]
    scratchpad: dict[str, Any]
    memory: dict[str, Any]
    docs: dict[str, Any]
    agent_md: dict[str, Any]
    vector_sync: dict[str, Any]
    series: dict[str, Any]


class ClientInfo(TypedDict):
    """``memman_set_client_info``."""

    connection: int
    name: str


class ClientRow(TypedDict):
    """One open connection in ``memman_clients_list``."""

    id: int
    name: str
    pid: int | None
    since: float
    requests: int
    requests_per_s: float
    info: dict[str, Any]
    subscriptions: list[Any]
    you: bool


class ClientsList(TypedDict):
    """``memman_clients_list``."""

    clients: list[ClientRow]
    at: float


class TokenCount(TypedDict):
    """``memman_count_tokens``."""

    tokens: int
    message_tokens: int
    tool_tokens: int
    per_message: list[int]
    encoding: str
    model: str


# --- sessions ----------------------------------------------------------------------------


class SessionOverview(TypedDict):
    """A session's overview row (``memman_session_list``, ``session`` in write results)."""

    session_id: str
    user_id: str | None
    tenant_id: str | None
    model: str
    max_tokens: int
    entries: int
    active_entries: int
    active_tokens: int
    summaries: int
    exchanges: int
    summary_bytes: int
    created_at: float
    updated_at: float
    counters: dict[str, int]
    agent: str  #: the coding agent whose conversation it logs ("" none)
    project: str  #: the project it belongs to ("" none)
    created: NotRequired[bool]  # memman_session_open: made now (not found)


class Entry(TypedDict):
    """One entry of the session log."""

    id: int
    session_id: str
    type: str
    role: str | None
    content: str
    tokens: int
    created_at: float
    name: str | None
    tool_call_id: str | None
    tool_calls: list[Any] | None
    metadata: dict[str, Any]
    pinned: bool
    summary_id: int | None


class Summary(TypedDict):
    """A compression summary and the entries it replaced."""

    id: int
    session_id: str
    content: str
    entry_ids: list[int]
    tokens: int
    original_tokens: int
    ratio: float
    start: float
    end: float
    created_at: float
    source: str
    removed_entry_ids: list[int]
    time_range: NotRequired[Any]


class Exchange(TypedDict):
    """One finished question and answer."""

    question: str
    answer: str
    answer_bytes: int
    summarized: bool
    at: float
    first_id: int | None
    last_id: int | None


class Cycle(TypedDict, total=False):
    """The Q&A cycle under way."""

    user_question: str | None
    agent_message_ids: list[int]
    final_answer: str | None
    start_id: int | None


class Usage(TypedDict, total=False):
    """Provider-billed usage against memman's count."""

    reports: int
    prompt_tokens: int
    completion_tokens: int
    last_drift: float | None
    mean_drift: float | None
    max_abs_drift: float | None
    drift_ratio: float | None


class SessionState(SessionOverview, total=False):
    """``memman_session_get``: the overview with the log (``entries`` is a list here)."""

    summary: str
    cycle: Cycle
    injection_done: bool
    encoding: str
    usage: Usage
    total_entries: int  # with opts.after_id / limit: one page of the log
    next_after_id: int | None  # where the next page starts (None on the last page)


class Added(TypedDict):
    """``memman_session_add``."""

    id: int
    tokens: int
    created_at: float


class Deleted(TypedDict):
    """``memman_session_delete``."""

    deleted: bool
    entries: int


class CycleState(TypedDict, total=False):
    exchanges: int
    summary_bytes: int
    llm_compressions: int
    summary_compressions: int
    cycles: int


class Finalized(TypedDict):
    """``memman_session_finalize``."""

    exchange: Exchange
    folded: int
    summary_compressed: bool
    agent_message_ids: list[int]
    added_entry_ids: list[int]
    state: CycleState


class RecalledSource(TypedDict):
    entry_id: int
    session_id: str
    date: str  #: YYYY-MM-DD (UTC)


class ContextPart(TypedDict):
    """One part of the context as sent, in order (``parts`` of context and preview)."""

    kind: str
    tokens: int
    entry_ids: list[int]
    summary_id: int | None
    score: float | None  #: the retrieval's fused score (kept entries the question needed)
    mark: str
    rank: NotRequired[int | None]  #: retrieval rank (from 1), None when not retrieved
    why: NotRequired[str]  #: why it is sent ("retrieved #3", "completes #3", "newest turns")
    date: NotRequired[str]  #: the date it opens with (an old entry, a question about time)
    superseded: NotRequired[bool]  #: it carries a "replaced later" note
    sources: NotRequired[list[RecalledSource]]  #: kind ``recalled``: each line's entry


class ScoreParts(TypedDict, total=False):
    """A recalled entry's retrieval figures (the daemon's retriever fills them)."""

    bm25: float
    bm25_rank: int | None
    vector: float
    vector_rank: int | None
    vector_model: str  #: "search", or "static (pending)" while its vector is pending
    fused: float
    supersedes: int  #: brought along: it replaced a value of this entry


class RecalledEntry(ScoreParts, total=False):
    """An entry of another of the user's sessions that a window brings back."""

    entry_id: int
    session_id: str  #: its source session
    date: str
    role: str
    tokens: int  #: of its quoted line
    note: str  #: "replaced later" / "current" when a newer recalled statement changed it
    text: str  #: the entry's content (``memman_session_context``)
    at: float  #: when it was logged (unix seconds; ``memman_session_context``)
    decision: str
    score_parts: dict[str, Any]
    rank: int | None


class Retrieval(TypedDict, total=False):
    stand_ins: int  #: hits ranked by the static model while their search vectors are pending
    pending_vectors: int  #: entries of the user's index still waiting for their vector


class Gap(TypedDict, total=False):
    """A run of entries left out of the context, and what stands in for it."""

    first_id: int
    last_id: int
    count: int
    tokens: int
    action: str
    source: str
    reason: str


class CachedTools(TypedDict, total=False):
    messages: int
    tokens: int
    note: str


class ContextFigures(TypedDict, total=False):
    """Figures shared by ``memman_session_context`` and ``memman_session_preview``.

    One figure, one name: ``tokens`` is what the LLM receives (tool definitions included),
    ``history_tokens`` the whole log, ``budget`` the request's budget and ``sent_usage`` /
    ``history_usage`` their shares of it. The daemon builds the answers from these shapes, so
    each field is declared here once for both sides of the wire."""

    session_id: str
    parts: list[ContextPart]
    breakdown: dict[str, int]
    tokens: int  #: what the LLM receives (tokens), tool definitions included
    history_tokens: int  #: the whole log as originals (tokens)
    sent_usage: float
    history_usage: float
    tool_tokens: int
    budget: int  #: the request's budget (tokens)
    usage: float
    band: str
    pruned: bool
    over_budget: bool
    model: str
    encoding: str
    query: str
    gaps: list[Gap]
    rolling_summary: str
    why: str
    cached_tools: CachedTools
    retrieval: Retrieval


class ContextAnswer(ContextFigures, total=False):
    """``memman_session_context``: the budgeted message list for the chat API."""

    messages: list[dict[str, Any]]
    emergency: bool
    kept_entries: int
    dropped_entries: int
    summarized_entries: int
    recalled: list[RecalledEntry]  #: past sessions' entries in the window (the ``recalled`` part)


class EntryDecision(TypedDict, total=False):
    """One entry's fate in a preview or report: keep, drop or summarize, and why."""

    entry_id: int
    type: str
    role: str | None
    tokens: int
    pinned: bool
    score: float
    score_parts: dict[str, Any]
    unit: int
    decision: str
    reason: str
    rank: int | None  #: retrieval rank for the question (from 1); None when not retrieved
    vector_model: str | None
    date: str
    superseded: bool
    summary_id: int
    group: list[int]


class SummaryDecision(TypedDict, total=False):
    summary_id: int
    tokens: int
    entry_ids: list[int]
    decision: str


class Compaction(TypedDict, total=False):
    """The daemon's own choice of what ``memman_session_compact`` would fold now."""

    entry_ids: list[int]
    tokens: int
    automatic: bool
    reason: str


class Preview(ContextFigures, total=False):
    """``memman_session_preview``: what context would keep, drop and summarize now."""

    entries: list[EntryDecision]
    summaries: list[SummaryDecision]
    compaction: Compaction
    messages: list[dict[str, Any]]  #: exactly what memman_session_context sends
    recalled: list[RecalledEntry]


class Pinned(TypedDict, total=False):
    """``memman_session_pin``."""

    entry_id: int
    pinned: bool
    audit_id: int


class RecallExcluded(TypedDict, total=False):
    """``memman_recall_exclude``."""

    session_id: str  #: the session whose windows no longer (or again) recall the entry
    entry_id: int  #: the recalled entry, of another session of the same user
    excluded: bool
    audit_id: int


class Expanded(TypedDict):
    """``memman_session_expand``."""

    summary: Summary
    entries: list[Entry]


class Compacted(TypedDict, total=False):
    """``memman_session_compact``: ``summary`` None (with ``reason``) when nothing qualifies."""

    summary: Summary | None
    tokens_saved: int
    reason: str
    session: SessionOverview


class SessionExport(TypedDict, total=False):
    """``memman_session_export`` (and what ``memman_session_import`` takes)."""

    format: str
    session_id: str
    meta: dict[str, Any]
    entries: list[Entry]
    summaries: list[Summary]
    links: list[dict[str, Any]]
    exchanges: list[Exchange]
    cycle: Cycle
    stats: dict[str, Any]
    total_entries: int  # with opts: one page of entries
    next_after_id: int | None


class Imported(TypedDict, total=False):
    """``memman_session_import``."""

    session_id: str
    entries: int
    summaries: int
    ids_remapped: bool
    session: SessionOverview


class Cleared(TypedDict):
    """``memman_session_clear``."""

    entries_removed: int
    summaries_removed: int
    session: SessionOverview


class UsageReported(TypedDict):
    """``memman_session_report_usage``."""

    record: dict[str, Any]
    usage: Usage


class Injected(TypedDict, total=False):
    """``memman_session_inject``."""

    entry_id: int
    cached: list[Any]
    messages: list[dict[str, Any]]


class Report(TypedDict, total=False):
    """``memman_session_report``: the MEMORY STATE text and the data behind it."""

    text: str
    state: CycleState
    band: str
    entries: list[EntryDecision]


class Removed(TypedDict, total=False):
    """``memman_session_remove`` / ``memman_session_pop``."""

    removed: Entry
    summaries: list[Any]
    audit_id: int
    session: SessionOverview


class SeriesPoint(TypedDict):
    """One point of the usage series: a context request, an exchange or a compaction."""

    id: int
    session_id: str
    at: float
    kind: str
    exchange: int
    sent_tokens: int
    history_tokens: int
    budget: int
    sent_usage: float
    history_usage: float


class Series(TypedDict):
    """``memman_session_series``, oldest first."""

    session_id: str
    budget: int
    bands: list[float]
    points: list[SeriesPoint]


class Undone(TypedDict, total=False):
    """``memman_undo``."""

    undone: "AuditRecord"
    audit_id: int | None
    result: Any
    dry_run: bool


# --- tool cache --------------------------------------------------------------------------


class CacheEntry(TypedDict):
    """A cached tool result (``memman_cache_put`` / ``memman_cache_lookup``, ``cache_list``)."""

    key: str
    session_id: str
    tool_name: str
    parameters: Any
    result: Any
    remaining_duration: int
    original_duration: int
    call_id: str | None
    cached_at: float
    ttl_s: float | None
    hits: int
    last_hit_at: float | None
    expires_at: float | None


class CacheList(TypedDict):
    """``memman_cache_list``: oldest first."""

    entries: list[CacheEntry]
    counters: dict[str, int]
    state: str


class CacheEvicted(TypedDict):
    """``memman_cache_evict``."""

    evicted: int


# --- scratchpad and audit ----------------------------------------------------------------


class Snippet(TypedDict):
    """A scratchpad snippet."""

    id: int
    session_id: str
    text: str
    created_at: float
    last_used_at: float
    used_seq: int
    frequency: int
    explicit: bool
    salience: float | None
    surprisal: float | None
    flow: str | None
    metadata: dict[str, Any]
    promoted: list[Any]


class SnippetWritten(TypedDict):
    """``memman_scratchpad_write``."""

    snippet: Snippet
    created: bool
    evicted: list[Any]


class ScratchpadRead(TypedDict):
    """``memman_scratchpad_read``."""

    snippets: list[Snippet]
    count: int
    max: int


class SnippetEvicted(TypedDict, total=False):
    """``memman_scratchpad_evict``."""

    evicted: int
    was_promoted: bool


class Candidate(TypedDict):
    """A snippet's promotion score, with the reason for each part."""

    snippet_id: int
    text: str
    score: float
    parts: dict[str, Any]
    candidate: bool
    promoted: list[Any]
    suggested_target: str
    frequency: int


class Candidates(TypedDict):
    """``memman_scratchpad_candidates``: best first."""

    candidates: list[Candidate]
    threshold: float
    weights: dict[str, float]


class Promoted(TypedDict, total=False):
    """``memman_scratchpad_promote``."""

    snippet: Snippet
    target: str
    ref: Any
    changed: bool
    replaced: Any
    audit_id: int


class AuditRecord(TypedDict):
    id: int
    at: float
    action: str
    what: str
    source: str | None
    target: str | None
    client: str | None
    session_id: str | None
    user_id: str | None
    tenant_id: str | None
    data: dict[str, Any]


class AuditList(TypedDict):
    """``memman_audit_list``: newest first."""

    records: list[AuditRecord]


# --- user memory -------------------------------------------------------------------------


class MemoryRecord(TypedDict, total=False):
    """A user-memory record (episodic, semantic or procedural); search adds its scores."""

    id: int
    user_id: str
    type: str
    kind: str
    key: str | None
    content: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    archived_by: int | None
    timestamp: float
    value: Any  # preference: the learned value
    condition: str  # rule: when it applies (its key)
    action: str  # rule: what to do (its content)
    flow: str  # playbook: the flow id (its key)
    slots: Any  # playbook
    tool_calls: Any  # playbook
    outcome: str | None  # playbook
    user_query: str | None  # playbook
    score: float
    lexical: float
    semantic: float
    recency: float


class MemoryAppended(TypedDict, total=False):
    """``memman_memory_append``."""

    type: str
    record: MemoryRecord
    created: bool
    duplicate_of: int
    similarity: float
    frequency: int


class MemoryRecords(TypedDict):
    """``memman_memory_list``: newest first."""

    records: list[MemoryRecord]


class MemorySearch(TypedDict):
    """``memman_memory_search``: best first."""

    results: list[MemoryRecord]
    mode: str


class SearchHit(TypedDict):
    """One hit of ``memman_search``: ``id`` as the forget methods take it (``memory:N``,
    ``snippet:SESSION#N``, ``doc:DOC_ID`` with its ``chunk:N``, ``entry:SESSION#N``)."""

    id: str
    kind: str  #: memory, snippet, doc or entry: the source it came from
    text: str
    source: str  #: where it came from, in words
    score: float  #: the merged score (rank fusion times the coverage weight)
    coverage: float  #: share of the question's words the hit carries
    native_score: float  #: the source's own score (not comparable across sources)
    chunk: NotRequired[str]


class SearchEverywhere(TypedDict):
    """``memman_search``: the merged hits, best first."""

    query: str
    hits: list[SearchHit]
    user_id: str
    tenant_id: str
    below_floor: int  #: hits left out for carrying too few of the question's words
    ranking: str  #: how the hits were ranked, in words


class Learned(TypedDict):
    """``memman_memory_learn``."""

    record: MemoryRecord
    changed: bool
    previous: Any


class Recalled(TypedDict):
    """``memman_memory_recall`` (None when nothing was learned under the key)."""

    key: str
    value: Any
    timestamp: float
    created_at: float
    id: int
    metadata: dict[str, Any]


class MemoryCompacted(TypedDict, total=False):
    """``memman_memory_compact``."""

    type: str
    archived: int
    summary_id: int | None
    kept: int


class MemoryStats(TypedDict, total=False):
    """``memman_memory_stats``."""

    user_id: str
    working_memory_tokens: int
    working_snippets: int
    episodic_entry_count: int
    semantic_entry_count: int
    procedural_rule_count: int
    playbook_count: int
    archived_count: int
    vector_count: int
    total_storage_bytes: int
    search_mode: str


class MemoryCleared(TypedDict):
    """``memman_memory_clear``."""

    cleared: dict[str, int]


class Forgotten(TypedDict, total=False):
    """``memman_memory_forget``."""

    forgotten: MemoryRecord
    summary_id: int | None
    unlinked: Any
    audit_id: int


class Playbook(TypedDict, total=False):
    """``memman_memory_playbook``."""

    playbook: MemoryRecord | None
    match: str | None
    similarity: float | None
    threshold: float
    mode: str
    candidates: list[dict[str, Any]]
    snippet: Snippet | None


# --- business context --------------------------------------------------------------------


class Document(TypedDict):
    """A tenant's document (its chunks are searched)."""

    pk: int
    tenant_id: str
    doc_id: str
    title: str | None
    source: str | None
    hash: str
    chunks: int
    tokens: int
    bytes: int
    created_at: float
    updated_at: float
    metadata: dict[str, Any]


class DocAdded(TypedDict):
    """``memman_docs_add``."""

    doc: Document
    changed: bool


class DocsList(TypedDict, total=False):
    """``memman_docs_list``."""

    docs: list[Document]
    agent_md: str | None


class DocHit(TypedDict, total=False):
    """One chunk found by ``memman_docs_search``."""

    doc_id: str
    title: str | None
    source: str | None
    chunk_id: int
    seq: int
    text: str
    score: float
    lexical: float
    parts: dict[str, Any]
    matched: list[str]
    candidates: int


class DocsSearch(TypedDict):
    """``memman_docs_search``: best first."""

    results: list[DocHit]
    mode: str


class DocDeleted(TypedDict, total=False):
    """``memman_docs_delete``."""

    deleted: str
    chunks: int


class DocRemoved(TypedDict, total=False):
    """``memman_docs_remove``."""

    removed: Document
    chunks: int
    audit_id: int
