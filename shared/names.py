"""Method and event names of the memman protocol, and ``METHODS``: the one list of methods with
their signatures, result types (from ``memman.types``) and docs, from which the typed client
methods are generated.

Names follow Neovim's convention: methods are ``memman_<noun>_<verb>``, events are
``memman_<noun>_event``. Published names never change; new ones are added.
"""

from memman.config import DEFAULT_MODEL

API_LEVEL = 1

# --- spine ---------------------------------------------------------------------------
GET_API_INFO = "memman_get_api_info"
STATS = "memman_stats"
PING = "memman_ping"
SET_CLIENT_INFO = "memman_set_client_info"
SUBSCRIBE = "memman_subscribe"
UNSUBSCRIBE = "memman_unsubscribe"
COUNT_TOKENS = "memman_count_tokens"

SESSION_OPEN = "memman_session_open"
SESSION_LIST = "memman_session_list"
SESSION_GET = "memman_session_get"
SESSION_ADD = "memman_session_add"
SESSION_DELETE = "memman_session_delete"

# --- session engine ---------------------------------------------------------------
SESSION_FINALIZE = "memman_session_finalize"
SESSION_CONTEXT = "memman_session_context"
SESSION_PREVIEW = "memman_session_preview"
SESSION_PIN = "memman_session_pin"
RECALL_EXCLUDE = "memman_recall_exclude"
SESSION_EXPAND = "memman_session_expand"
SESSION_COMPACT = "memman_session_compact"
SESSION_EXPORT = "memman_session_export"
SESSION_IMPORT = "memman_session_import"
SESSION_CLEAR = "memman_session_clear"
SESSION_REPORT_USAGE = "memman_session_report_usage"
SESSION_INJECT = "memman_session_inject"
SESSION_REPORT = "memman_session_report"

# --- tool cache -----------------------------------------------------------------------
CACHE_LOOKUP = "memman_cache_lookup"
CACHE_PUT = "memman_cache_put"
CACHE_LIST = "memman_cache_list"
CACHE_EVICT = "memman_cache_evict"

# --- scratchpad ---------------------------------------------------------------------
SCRATCHPAD_WRITE = "memman_scratchpad_write"
SCRATCHPAD_READ = "memman_scratchpad_read"
SCRATCHPAD_EVICT = "memman_scratchpad_evict"
SCRATCHPAD_CANDIDATES = "memman_scratchpad_candidates"
SCRATCHPAD_PROMOTE = "memman_scratchpad_promote"
AUDIT_LIST = "memman_audit_list"

# --- user memory ----------------------------------------------------------------------
MEMORY_APPEND = "memman_memory_append"
MEMORY_SEARCH = "memman_memory_search"
MEMORY_LEARN = "memman_memory_learn"
MEMORY_RECALL = "memman_memory_recall"
MEMORY_COMPACT = "memman_memory_compact"
MEMORY_STATS = "memman_memory_stats"
MEMORY_CLEAR = "memman_memory_clear"
MEMORY_LIST = "memman_memory_list"
MEMORY_PLAYBOOK = "memman_memory_playbook"

# --- business context -----------------------------------------------------------------
DOCS_ADD = "memman_docs_add"
DOCS_SEARCH = "memman_docs_search"
DOCS_LIST = "memman_docs_list"
DOCS_DELETE = "memman_docs_delete"

# --- the terminal app's views (what the LLM receives, over time; undo; connections) ------
SESSION_SERIES = "memman_session_series"
UNDO = "memman_undo"
CLIENTS_LIST = "memman_clients_list"

# --- events (notifications pushed to subscribers) -------------------------------------
SESSION_EVENT = "memman_session_event"
CACHE_EVENT = "memman_cache_event"
SCRATCHPAD_EVENT = "memman_scratchpad_event"
MEMORY_EVENT = "memman_memory_event"
DOCS_EVENT = "memman_docs_event"
STATS_EVENT = "memman_stats_event"
ERROR_EVENT = "memman_error_event"

#: subscription topic -> the event name published on it
TOPICS: dict[str, str] = {
    "session": SESSION_EVENT,
    "cache": CACHE_EVENT,
    "scratchpad": SCRATCHPAD_EVENT,
    "memory": MEMORY_EVENT,
    "docs": DOCS_EVENT,
    "stats": STATS_EVENT,
}

# --- forget one thing (one entry, record or document, audited) ---------------------------
SESSION_REMOVE = "memman_session_remove"
SESSION_POP = "memman_session_pop"
MEMORY_FORGET = "memman_memory_forget"
DOCS_REMOVE = "memman_docs_remove"

# --- signatures: the one list the typed client methods are generated from ----------------
# scripts/gen_client_methods.py writes shared/methods.py (Client / SyncClient methods with these
# signatures and docstrings); tests/spine/test_method_specs.py checks every entry against the
# daemon's registry and that shared/methods.py is current. A method added to the daemon gets a
# line here (clients older than it still reach it through ``call`` / ``__getattr__``).
class MethodSpec:
    """One method: ``params`` as a Python signature (``"session_id: str, opts: dict = {}"``)."""

    __slots__ = ("name", "params", "returns", "doc", "writes")

    def __init__(self, name: str, params: str, returns: str, doc: str, *,
                 writes: bool = False) -> None:
        self.name, self.params, self.returns, self.doc, self.writes = (
            name, params, returns, doc, writes)


_M = MethodSpec
METHODS: tuple[MethodSpec, ...] = (
    _M(GET_API_INFO, "", "ApiInfo",
       "The api level, version, every method (with its parameters) and event."),
    _M(STATS, "", "Stats", "The daemon's counters: clients, requests, sessions, store, tokenizer."),
    _M(PING, "", "str", 'Answers "pong".'),
    _M(SET_CLIENT_INFO, "name: str, info: dict = {}", "ClientInfo",
       'Name this connection; info.errors = "nvim" asks for Neovim-style errors.'),
    _M(SUBSCRIBE, "topics: list = [], filter: dict = {}", "dict",
       "Start receiving events on this connection (topics: event nouns, empty = all; filter: "
       "session_id, user_id, tenant_id)."),
    _M(UNSUBSCRIBE, "subscription: int", "dict", "Stop a subscription."),
    _M(COUNT_TOKENS,
       f"messages: list, model: str | dict = {DEFAULT_MODEL!r}, tools: list | dict = []",
       "TokenCount",
       "Prompt tokens of a chat request as the API bills it (tools counted apart as "
       "tool_tokens), and the encoding that counted; model may be an options map {model, "
       "tools}."),
    _M(SESSION_OPEN, "session_id: str, opts: dict = {}", "SessionOverview",
       "Create a session (or return the existing one); opts: user_id, tenant_id, model, "
       "max_tokens.", writes=True),
    _M(SESSION_LIST, "filter: dict = {}", "list[SessionOverview]",
       "Every session's overview row; filter by user_id / tenant_id."),
    _M(SESSION_GET, "session_id: str, opts: dict = {}", "SessionState",
       "The session's state: overview, rolling summary, exchanges, cycle, entries, summaries "
       "(opts.limit: newest entries only; opts.entries=false: none; opts.after_id + limit: "
       "one page by entry range, next_after_id says where the next starts)."),
    _M(SESSION_ADD, "session_id: str, entry: dict", "Added",
       "Append a typed entry; returns its id and tokens (counted once, here).", writes=True),
    _M(SESSION_DELETE, "session_id: str", "Deleted",
       "Delete the session and everything in it.", writes=True),
    _M(SESSION_FINALIZE, "session_id: str, question: str, answer: str", "Finalized",
       "End the current Q&A cycle: record the exchange, fold old ones into the rolling summary.",
       writes=True),
    _M(SESSION_CONTEXT, "session_id: str, opts: dict = {}", "ContextAnswer",
       "The budgeted message list for the chat API, with tokens, band and what was dropped "
       "(opts: max_tokens, query, tools, ...)."),
    _M(SESSION_PREVIEW, "session_id: str, opts: dict = {}", "Preview",
       "What context would keep, drop and summarize now, per entry with score and reason."),
    _M(SESSION_PIN, "session_id: str, entry_id: int, pinned: bool = True", "Pinned",
       "Pin (or unpin) an entry: pinned entries always stay in the context.", writes=True),
    _M(RECALL_EXCLUDE, "session_id: str, entry_id: int, excluded: bool = True",
       "RecallExcluded",
       "Stop (or resume) recalling another session's entry in this session's windows "
       "(audited; memman_undo reverses it).", writes=True),
    _M(SESSION_EXPAND, "session_id: str, summary_id: int", "Expanded",
       "A compression summary and the original entries it replaced."),
    _M(SESSION_COMPACT, "session_id: str", "Compacted",
       "Compress entries older than the recent window now.", writes=True),
    _M(SESSION_EXPORT, "session_id: str, opts: dict = {}", "SessionExport",
       "Everything: entries, summaries, links, exchanges, cycle, stats (opts.after_id + "
       "limit: one page of entries; next_after_id says where the next starts)."),
    _M(SESSION_IMPORT, "data: dict, opts: dict = {}", "Imported",
       "Restore an export (opts: session_id to rename, replace to overwrite).", writes=True),
    _M(SESSION_CLEAR, "session_id: str", "Cleared",
       "Remove every entry, summary, exchange and the rolling summary; keep the session.",
       writes=True),
    _M(SESSION_REPORT_USAGE, "session_id: str, prompt_tokens: int, completion_tokens: int = 0",
       "UsageReported", "Record what the provider billed; the drift against memman's count is in the "
       "stats.", writes=True),
    _M(SESSION_INJECT, "session_id: str, prompt_injection: str, tool_results: list = []", "Injected",
       "One-time context injection; a second call fails with ALREADY_DONE (-32006).",
       writes=True),
    _M(SESSION_REPORT, "session_id: str, opts: dict = {}", "Report",
       "The MEMORY STATE text (what `memman show` prints) and the data behind it."),
    _M(CACHE_LOOKUP, "session_id: str, tool: str, params: dict", "CacheEntry | None",
       "The cached entry (duration refreshed; result as it was put), or None on a miss."),
    _M(CACHE_PUT, "session_id: str, tool: str, params: dict, result: Any, opts: dict = {}",
       "CacheEntry", "Cache a tool result of any type; opts: duration (exchanges), ttl_s (seconds), "
       "call_id.", writes=True),
    _M(CACHE_LIST, "session_id: str", "CacheList",
       "Every cached entry of the session (oldest first), its counters and state text."),
    _M(CACHE_EVICT, "session_id: str, key: str", "CacheEvicted",
       'Evict the entry with this key ("*": every entry of the session).', writes=True),
    _M(SCRATCHPAD_WRITE, "session_id: str, text: str, opts: dict = {}", "SnippetWritten",
       "Add a snippet (or raise its frequency); opts: explicit, salience, surprisal, flow, "
       "metadata.", writes=True),
    _M(SCRATCHPAD_READ, "session_id: str, ids: list | None = None", "ScratchpadRead",
       "All snippets (or the given ids) in writing order; a read counts as use for LRU."),
    _M(SCRATCHPAD_EVICT, "session_id: str, snippet_id: int", "SnippetEvicted",
       "Evict one snippet.", writes=True),
    _M(SCRATCHPAD_CANDIDATES, "session_id: str", "Candidates",
       "Every snippet's promotion score (best first), with the reason for each part."),
    _M(SCRATCHPAD_PROMOTE, "session_id: str, snippet_id: int, target: str, opts: dict = {}",
       "Promoted", "Promote to preference, rule, playbook or business; CONFLICT unless opts.replace.",
       writes=True),
    _M(AUDIT_LIST, "filter: dict = {}", "AuditList",
       "Audit records, newest first; filter: session_id, user_id, tenant_id, action, limit."),
    _M(MEMORY_APPEND, "user_id: str, type: str, entry: dict", "MemoryAppended",
       "Append to a user's episodic, semantic or procedural memory.", writes=True),
    _M(MEMORY_SEARCH, "user_id: str, type: str, query: str, opts: dict = {}", "MemorySearch",
       "Best first with scores; opts: limit, kind, flow, session_id."),
    _M(MEMORY_LEARN, "user_id: str, key: str, value: Any, opts: dict = {}", "Learned",
       "Remember a keyed value (a preference); opts: replace, metadata.", writes=True),
    _M(MEMORY_RECALL, "user_id: str, key: str", "Recalled | None",
       "The value learned under key (with its record), or None."),
    _M(MEMORY_COMPACT, "user_id: str, type: str, opts: dict = {}", "MemoryCompacted",
       "Fold old entries of a memory type into a summary.", writes=True),
    _M(MEMORY_STATS, "user_id: str", "MemoryStats", "Counts and tokens of a user's memory."),
    _M(MEMORY_CLEAR, "user_id: str, type: str = ''", "MemoryCleared",
       "Clear a user's memory (one type, or all).", writes=True),
    _M(MEMORY_LIST, "user_id: str, type: str, opts: dict = {}", "MemoryRecords",
       "A user's memory entries of one type."),
    _M(DOCS_ADD, "tenant_id: str, doc: dict", "DocAdded",
       "Add or replace a document: doc = {content, doc_id?, title?, source?, metadata?}.",
       writes=True),
    _M(DOCS_SEARCH, "tenant_id: str, query: str, opts: dict = {}", "DocsSearch",
       "Chunks best first; opts: limit, candidates."),
    _M(DOCS_LIST, "tenant_id: str", "DocsList", "The tenant's documents."),
    _M(DOCS_DELETE, "tenant_id: str, doc_id: str", "DocDeleted",
       "Delete a document and its chunks.", writes=True),
    _M(SESSION_REMOVE, "session_id: str, entry_id: int", "Removed",
       "Remove one entry (audited); summaries that linked it drop the link and say so.",
       writes=True),
    _M(SESSION_POP, "session_id: str", "Removed",
       "Remove the newest entry (audited) and return it.", writes=True),
    _M(MEMORY_FORGET, "user_id: str, record_id: int", "Forgotten",
       "Forget one user-memory record (audited).", writes=True),
    _M(DOCS_REMOVE, "tenant_id: str, ref: Any", "DocRemoved",
       "Remove one document, by doc_id or by one of its chunk ids (audited).", writes=True),
    _M(MEMORY_PLAYBOOK, "user_id: str, query: str, opts: dict = {}", "Playbook",
       "The playbook for this request (exact flow first, then by meaning above a threshold); "
       "with opts.session_id it is written to that session's scratchpad."),
    _M(SESSION_SERIES, "session_id: str, opts: dict = {}", "Series",
       "The session's usage series, oldest first: sent and history tokens per context "
       "request, exchange and compaction; opts: limit."),
    _M(UNDO, "opts: dict = {}", "Undone",
       "Reverse this client's newest pin, unpin, eviction or promotion (through the audit "
       "log); opts: client, session_id, audit_id, dry_run.", writes=True),
    _M(CLIENTS_LIST, "", "ClientsList",
       "Every open connection: name, pid, since, requests, requests/s, subscriptions."),
)
del _M
