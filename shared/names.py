"""Method and event names of the memman protocol. Each method is declared (parameters, result
type, writes, doc) once, in ``memman.api``.

Names follow Neovim's convention: methods are ``memman_<noun>_<verb>``, events are
``memman_<noun>_event``. Published names never change; new ones are added.
"""

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
#: one search over everything the caller may read (memory, scratchpads, documents, sessions)
SEARCH = "memman_search"

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
