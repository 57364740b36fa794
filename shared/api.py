"""The protocol's methods, each declared once: name, parameters (their schemas and defaults),
result type, whether it writes, and its doc.

Everything else is derived from ``METHODS``: the daemon checks each request against the
declared parameters and binds a handler to each declaration (``@handles(names.X)`` in
``memman_daemon/api/<noun>.py``; a handler whose parameters differ from the declaration, a
declaration without a handler and a handler without one fail at start); ``memman_get_api_info``
answers from it; ``scripts/gen_client_methods.py`` writes the typed ``Client`` / ``SyncClient``
methods (``shared/methods.py``) and the method table of ``docs/protocol.md`` from it; the
clients retry only the methods that do not write (``memman.reconnect.READ_ONLY``).

A new method is one ``Method(...)`` here plus its handler; then run
``python scripts/gen_client_methods.py``. Published names never change (``memman.names``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memman import names
from memman.config import DEFAULT_MODEL
from memman.errors import ERROR_STYLES, MemmanError, invalid_params
from memman.params import (
    COUNT,
    MAX_TOKENS,
    METADATA,
    ROW_ID,
    TOKENS,
    UNIT,
    AnyOf,
    Array,
    Bool,
    Float,
    Id,
    Int,
    Map,
    Nullable,
    Param,
    Stored,
    Str,
)
from memman.schemas import (
    AGENT,
    CACHE_OPTS,
    CHAT_MESSAGE,
    CONTEXT_OPTS,
    COSINE,
    DOC_REF,
    ENTRY_IN,
    EXPORT,
    INJECTED_RESULT,
    LIMIT,
    MEMORY_TYPE,
    MODEL,
    PROJECT,
    RECORD_REF,
    SCOPE_FILTER,
    SESSION_ID,
    TENANT_ID,
    TOOL,
    TOOL_DEFINITIONS,
    TOOL_PARAMS,
    USER_ID,
)


@dataclass(frozen=True)
class Method:
    """One protocol method. ``returns`` names a result shape of ``memman.types`` (or a builtin:
    ``str``, ``dict``, ``list[X]``, ``X | None``); ``writes``: refused when the daemon runs
    read-only, and never retried after a lost connection; ``offload``: its parameters may be
    large (an import file), so the daemon checks them on a worker thread."""

    name: str
    params: tuple[Param, ...] = ()
    returns: str = "dict"
    doc: str = ""
    writes: bool = False
    offload: bool = False

    @property
    def summary(self) -> str:
        """The doc's first paragraph, on one line."""
        return " ".join(self.doc.split("\n\n", 1)[0].split())

    def signature(self) -> str:
        """The parameters as a Python signature: ``session_id: str, opts: dict = {}``."""
        return ", ".join(p.signature() for p in self.params)

    def bind(self, params: Any) -> dict[str, Any]:
        """The positional ``params`` of a request, checked and by name (defaults filled in);
        -32602 naming the path of the first bad value."""
        if not isinstance(params, (list, tuple)):
            raise MemmanError(-32602, f"invalid params for {self.name}: params must be an array, "
                                      f"got {type(params).__name__}")
        if len(params) > len(self.params):
            raise MemmanError(-32602, f"invalid params for {self.name}: takes at most "
                                      f"{len(self.params)} parameters, got {len(params)}")
        kwargs: dict[str, Any] = {}
        for i, p in enumerate(self.params):
            if i < len(params):
                kwargs[p.name] = p.check(params[i])
            elif p.required:
                raise invalid_params(p.name, f"missing (required parameter {i + 1} of {self.name})")
            else:
                kwargs[p.name] = p.default_value()
        return kwargs

    def info(self) -> dict[str, Any]:
        """What ``memman_get_api_info`` says of this method."""
        return {"name": self.name, "params": [p.name for p in self.params],
                "writes": self.writes, "signature": self.signature(), "returns": self.returns,
                "doc": self.summary}


# an optional options map has ``default=dict``: absent or nil, it is no options
_M, _P = Method, Param

METHODS: tuple[Method, ...] = (
    # --- spine ---------------------------------------------------------------------------
    _M(names.GET_API_INFO, (), "ApiInfo",
       "The api level, version, every method (with its parameters, signature, result type and "
       "doc) and event."),
    _M(names.STATS, (), "Stats",
       "The daemon's counters: clients, requests, sessions, store, tokenizer."),
    _M(names.PING, (), "str", 'Answers "pong".'),
    _M(names.SET_CLIENT_INFO,
       (_P("name", Str(min_len=1, max_len=128, max_bytes=512)),
        _P("info", Map({"errors": Str(choices=ERROR_STYLES)}, rest=Stored(), doc="a map"),
           default=dict)), "ClientInfo",
       "Name this connection (as Neovim's nvim_set_client_info): the audit log and stats show "
       "it; info.errors = \"nvim\" asks for Neovim-style errors.\n\n"
       "``info.errors = \"nvim\"`` sends this connection's errors Neovim-style, ``[0, \"[code] "
       "message\"]``, so that ``vim.rpcrequest`` shows the message; ``\"memman\"`` (the "
       "default) is ``[code, message]``."),
    _M(names.SUBSCRIBE,
       (_P("topics", Array(Str(max_bytes=64), max_items=64), default=list),
        _P("filter", SCOPE_FILTER, default=dict)), "dict",
       "Start receiving events on this connection (topics: event nouns, empty = all; filter: "
       "session_id, user_id, tenant_id); returns the subscription id."),
    _M(names.UNSUBSCRIBE, (_P("subscription", ROW_ID),), "dict", "Stop a subscription."),
    _M(names.COUNT_TOKENS,
       (_P("messages", Array(CHAT_MESSAGE)),
        _P("model", AnyOf((MODEL, Map({"model": MODEL, "tools": TOOL_DEFINITIONS},
                                      empty_array_ok=False))), default=DEFAULT_MODEL,
           doc="a model name, or an options map {model, tools}"),
        _P("tools", AnyOf((TOOL_DEFINITIONS, Map({"tools": Nullable(TOOL_DEFINITIONS)}))),
           default=list,
           doc="the tools= list as sent to the chat API, or an options map {tools: [...]}")),
       "TokenCount",
       "Prompt tokens of a chat request as the API bills it (tools counted apart as "
       "tool_tokens), and the encoding that counted; model may be an options map {model, "
       "tools}.\n\n"
       "``tools`` (the function definitions as sent to the API) are counted with the "
       "cookbook's billing formula and reported apart as ``tool_tokens``; ``tokens`` includes "
       "them."),
    _M(names.SESSION_OPEN,
       (_P("session_id", SESSION_ID),
        _P("opts", Map({"user_id": Id(), "tenant_id": Id(), "model": MODEL,
                        "max_tokens": MAX_TOKENS, "recall": Bool(), "reassign": Bool(),
                        "agent": AGENT, "project": PROJECT, "recall_project": Bool()}),
           default=dict)),
       "SessionOverview",
       "Create a session (or return the existing one); opts: user_id, tenant_id, model, "
       "max_tokens, recall (false: this session neither recalls nor is recalled), reassign, "
       "agent, project, recall_project.\n\n"
       "``agent`` and ``project`` are recorded on the session and shown with it (a coding "
       "agent's conversation: ``memman hook``). ``recall_project`` (true): the session "
       "recalls only sessions recorded with the same ``project``, and only they recall it "
       "(``memman.scope.same_project``; another host's entries, whose project is not known "
       "here, are not recalled by it).\n\n"
       "An existing session keeps its owner: re-opening it with another ``user_id`` or "
       "``tenant_id`` is refused (-32002, data ``{owner: {user_id, tenant_id}}``) unless "
       "``opts.reassign`` is true; a reassignment commits with its audit row (action "
       "``reassign``).", writes=True),
    _M(names.SESSION_LIST, (_P("filter", Map({"user_id": Id(), "tenant_id": Id()}), default=dict),),
       "list[SessionOverview]", "Every session's overview row; filter by user_id / tenant_id."),
    _M(names.SESSION_GET,
       (_P("session_id", SESSION_ID),
        _P("opts", Map({"limit": COUNT, "entries": Bool(), "after_id": ROW_ID}), default=dict)),
       "SessionState",
       "The session's state: overview, rolling summary, exchanges, cycle, entries, summaries "
       "(opts.limit: newest entries only; opts.entries=false: none; opts.after_id + limit: "
       "one page by entry range, next_after_id says where the next starts).\n\n"
       "opts.after_id pages by entry range: the entries with an id above it, oldest first, at "
       "most ``limit`` of them; ``next_after_id`` is where the next page starts (nil at the "
       "end)."),
    _M(names.SESSION_ADD, (_P("session_id", SESSION_ID), _P("entry", ENTRY_IN)), "Added",
       "Append a typed entry; returns its id and tokens (counted once, here).", writes=True),
    _M(names.SESSION_DELETE, (_P("session_id", SESSION_ID),), "Deleted",
       "Delete the session and everything in it.", writes=True),
    # --- session engine ------------------------------------------------------------------
    _M(names.SESSION_FINALIZE,
       (_P("session_id", SESSION_ID), _P("question", Str()), _P("answer", Str())), "Finalized",
       "End the current Q&A cycle: record the exchange, fold old ones into the rolling summary.",
       writes=True),
    _M(names.SESSION_CONTEXT,
       (_P("session_id", SESSION_ID), _P("opts", CONTEXT_OPTS, default=dict)),
       "ContextAnswer",
       "The budgeted message list for the chat API, with tokens, band and what was dropped "
       "(opts: max_tokens, query, tools, ...).\n\n"
       "``opts.peek`` (true): the same answer with no side effects — no compression check, no "
       "``pruned`` event, no usage-series point (a viewer such as the TUI looks without "
       "changing what it looks at)."),
    _M(names.SESSION_PREVIEW,
       (_P("session_id", SESSION_ID), _P("opts", CONTEXT_OPTS, default=dict)),
       "Preview",
       "What context would keep, drop and summarize now, per entry with score and reason."),
    _M(names.SESSION_PIN,
       (_P("session_id", SESSION_ID), _P("entry_id", ROW_ID),
        _P("pinned", Bool(), default=True)), "Pinned",
       "Pin (or unpin) an entry: pinned entries always stay in the context.\n\n"
       "A change and its audit row (action ``pin`` / ``unpin``) commit together, so "
       "``memman_undo`` can reverse it.", writes=True),
    _M(names.RECALL_EXCLUDE,
       (_P("session_id", SESSION_ID), _P("entry_id", ROW_ID),
        _P("excluded", Bool(), default=True)), "RecallExcluded",
       "Stop (or resume) recalling another session's entry in this session's windows "
       "(audited; memman_undo reverses it).\n\n"
       "The entry must be one of another of the user's sessions; the change and its audit row "
       "commit together.", writes=True),
    _M(names.SESSION_EXPAND, (_P("session_id", SESSION_ID), _P("summary_id", ROW_ID)),
       "Expanded", "A compression summary and the original entries it replaced."),
    _M(names.SESSION_COMPACT, (_P("session_id", SESSION_ID),), "Compacted",
       "Compress entries older than the recent window now.", writes=True),
    _M(names.SESSION_EXPORT,
       (_P("session_id", SESSION_ID),
        _P("opts", Map({"after_id": ROW_ID, "limit": COUNT}), default=dict)), "SessionExport",
       "Everything: entries, summaries, links, exchanges, cycle, stats (opts.after_id + "
       "limit: one page of entries; next_after_id says where the next starts).\n\n"
       "An answer over the output cap is refused with how to page it."),
    _M(names.SESSION_IMPORT,
       (_P("data", EXPORT), _P("opts", Map({"session_id": Id(), "replace": Bool(), "reassign": Bool()}),
                          default=dict)),
       "Imported",
       "Restore an export (opts: session_id to rename, replace to overwrite).\n\n"
       "``replace`` over a session of another owner (user or tenant) than the file's is "
       "refused (-32002, data ``{owner, asked}``) unless ``opts.reassign`` is true (audited, "
       "as ``memman_session_open``'s reassign).\n\n"
       "Its own bound: ``[limits] import_max_entries`` / ``import_max_bytes``.",
       writes=True, offload=True),
    _M(names.SESSION_CLEAR, (_P("session_id", SESSION_ID),), "Cleared",
       "Remove every entry, summary, exchange and the rolling summary; keep the session.",
       writes=True),
    _M(names.SESSION_REPORT_USAGE,
       (_P("session_id", SESSION_ID), _P("prompt_tokens", TOKENS),
        _P("completion_tokens", TOKENS, default=0)), "UsageReported",
       "Record what the provider billed; the drift against memman's count is in the stats.",
       writes=True),
    _M(names.SESSION_INJECT,
       (_P("session_id", SESSION_ID), _P("prompt_injection", Str()),
        _P("tool_results", Array(INJECTED_RESULT), default=list)), "Injected",
       "One-time context injection; a second call fails with ALREADY_DONE (-32006).",
       writes=True),
    _M(names.SESSION_REPORT,
       (_P("session_id", SESSION_ID), _P("opts", CONTEXT_OPTS, default=dict)),
       "Report",
       "The MEMORY STATE text (what `memman show` prints) and the data behind it."),
    # --- tool cache ----------------------------------------------------------------------
    _M(names.CACHE_LOOKUP,
       (_P("session_id", SESSION_ID), _P("tool", TOOL), _P("params", TOOL_PARAMS)),
       "CacheEntry | None",
       "The cached entry (duration refreshed; result as it was put), or None on a miss."),
    _M(names.CACHE_PUT,
       (_P("session_id", SESSION_ID), _P("tool", TOOL), _P("params", TOOL_PARAMS),
        _P("result", Stored()), _P("opts", CACHE_OPTS, default=dict)), "CacheEntry",
       "Cache a tool result of any type; opts: duration (exchanges), ttl_s (seconds), "
       "call_id.", writes=True),
    _M(names.CACHE_LIST, (_P("session_id", SESSION_ID),), "CacheList",
       "Every cached entry of the session (oldest first), its counters and the FUNCTION CACHE "
       "STATE text."),
    _M(names.CACHE_EVICT,
       (_P("session_id", SESSION_ID), _P("key", Str(min_len=1, max_bytes=1024))),
       "CacheEvicted", 'Evict the entry with this key ("*": every entry of the session).',
       writes=True),
    # --- scratchpad and audit ----------------------------------------------------------
    _M(names.SCRATCHPAD_WRITE,
       (_P("session_id", SESSION_ID), _P("text", Str(min_len=1, strip_empty=True)),
        _P("opts", Map({"explicit": Bool(), "salience": Nullable(UNIT),
                        "surprisal": Nullable(UNIT), "flow": Nullable(Str()),
                        "metadata": Nullable(METADATA)}), default=dict)), "SnippetWritten",
       "Add a snippet (or raise its frequency); opts: explicit, salience, surprisal, flow, "
       "metadata.", writes=True),
    _M(names.SCRATCHPAD_READ,
       (_P("session_id", SESSION_ID),
        _P("ids", Nullable(Array(ROW_ID, max_items=10_000)), default=None)), "ScratchpadRead",
       "All snippets (or the given ids) in writing order; a read counts as use for LRU."),
    _M(names.SCRATCHPAD_EVICT, (_P("session_id", SESSION_ID), _P("snippet_id", ROW_ID)),
       "SnippetEvicted", "Evict one snippet.", writes=True),
    _M(names.SCRATCHPAD_CANDIDATES, (_P("session_id", SESSION_ID),), "Candidates",
       "Every snippet's promotion score (best first), with the reason for each part."),
    _M(names.SCRATCHPAD_PROMOTE,
       (_P("session_id", SESSION_ID), _P("snippet_id", ROW_ID),
        _P("target", Str(choices=("preference", "rule", "playbook", "business"))),
        _P("opts", Map({"replace": Bool(), "key": Nullable(Id()), "value": Nullable(Str()),
                        "condition": Nullable(Str()), "action": Nullable(Str()),
                        "text": Nullable(Str()), "flow": Nullable(Str()),
                        "flow_dact": Nullable(Str()), "slots": Nullable(Stored()),
                        "tool_calls": Nullable(Stored()), "outcome": Nullable(Str()),
                        "user_query": Nullable(Str())}), default=dict)), "Promoted",
       "Promote to preference, rule, playbook or business; CONFLICT unless opts.replace.",
       writes=True),
    _M(names.AUDIT_LIST,
       (_P("filter", Map({"session_id": Nullable(Id()), "user_id": Nullable(Id()),
                          "tenant_id": Nullable(Id()), "action": Nullable(Str(max_bytes=64)),
                          "before_id": Nullable(ROW_ID), "limit": Nullable(LIMIT)}),
           default=dict),),
       "AuditList",
       "Audit records, newest first; filter: session_id, user_id, tenant_id, action, "
       "before_id, limit (100)."),
    # --- user memory ---------------------------------------------------------------------
    _M(names.MEMORY_APPEND,
       (_P("user_id", USER_ID), _P("type", MEMORY_TYPE),
        _P("entry", Map({
            "content": Nullable(Str()), "metadata": Nullable(METADATA), "id": Nullable(Stored()),
            "timestamp": Nullable(Float(0.0, 1e11, doc="unix seconds")),
            "key": Nullable(Id()), "condition": Nullable(Str()),
            "action": Nullable(Str()), "flow": Nullable(Str()), "flow_dact": Nullable(Str()),
            "slots": Nullable(Stored()), "tool_calls": Nullable(Stored()),
            "outcome": Nullable(Str()), "user_query": Nullable(Str()),
            "session_id": Nullable(Id())}, rest=Stored(), empty_array_ok=False))),
       "MemoryAppended", "Append to a user's episodic, semantic or procedural memory.",
       writes=True),
    _M(names.MEMORY_SEARCH,
       (_P("user_id", USER_ID), _P("type", MEMORY_TYPE), _P("query", Str()),
        _P("opts", Map({"limit": Nullable(LIMIT), "kind": Nullable(Str(max_bytes=64)),
                        "flow": Nullable(Str()), "session_id": Nullable(Id()),
                        "threshold": Nullable(COSINE),
                        "mode": Nullable(Str(choices=("hybrid", "fts", "vector"))),
                        "tenant_id": TENANT_ID, "project": Nullable(PROJECT),
                        "key_prefixes": Nullable(Array(Str(max_bytes=1024), max_items=16,
                                                       min_items=1))}),
           default=dict)),
       "MemorySearch",
       "Best first with scores; opts: limit, kind, flow (exact id first, then similarity), "
       "threshold, mode (hybrid, fts, vector), session_id, tenant_id, project, key_prefixes "
       "(the stored layers: only keyed records whose key starts with one of them, applied "
       "before ranking).\n\n"
       "Type ``session``: what the user's sessions *within the tenant* said (opts.tenant_id; "
       "unnamed: the one tenant the user's sessions are in, -32602 naming it when there are "
       "several; the recall index: BM25 + the search model): across sessions "
       "never a private entry, an entry of a session opened with ``recall: false`` or one "
       "forgotten for recall; opts.session_id (the user's own session in that tenant) for one. "
       "opts.project: only sessions recorded with that project (``memman_session_open`` "
       "opts.project), never another host's; without it, never a session that keeps to its "
       "project (``recall_project``)."),
    _M(names.MEMORY_LEARN,
       (_P("user_id", USER_ID), _P("key", Id("answer_style")), _P("value", Stored()),
        _P("opts", Map({"replace": Bool(), "metadata": Nullable(METADATA)}), default=dict)),
       "Learned", "Remember a keyed value (a preference); opts: replace, metadata.",
       writes=True),
    _M(names.MEMORY_RECALL, (_P("user_id", USER_ID), _P("key", Id("answer_style"))),
       "Recalled | None", "The value learned under key (with its record), or None."),
    _M(names.MEMORY_COMPACT,
       (_P("user_id", USER_ID), _P("type", MEMORY_TYPE),
        _P("opts", Map({"keep_last": Int(0, 2**31, doc="a whole number >= 0"),
                        "summarize_older": Bool()}), default=dict)), "MemoryCompacted",
       "Fold old entries of a memory type into a summary.", writes=True),
    _M(names.MEMORY_STATS, (_P("user_id", USER_ID),), "MemoryStats",
       "Counts and tokens of a user's memory."),
    _M(names.MEMORY_CLEAR, (_P("user_id", USER_ID), _P("type", MEMORY_TYPE, default="")),
       "MemoryCleared", "Clear a user's memory (one type, or all).", writes=True),
    _M(names.MEMORY_LIST,
       (_P("user_id", USER_ID), _P("type", MEMORY_TYPE),
        _P("opts", Map({"limit": Nullable(LIMIT), "before_id": Nullable(ROW_ID),
                        "kind": Nullable(Str(max_bytes=64)),
                        "include_archived": Nullable(Bool())}), default=dict)), "MemoryRecords",
       "A user's memory entries of one type."),
    _M(names.SEARCH,
       (_P("user_id", USER_ID), _P("query", Str(min_len=1, strip_empty=True)),
        _P("opts", Map({"limit": Nullable(Int(1, 50, doc="an integer from 1 to 50")),
                        "tenant_id": TENANT_ID,
                        "min_coverage": Nullable(Float(0.0, 1.0, doc="a share from 0 to 1"))}),
           default=dict)),
       "SearchEverywhere",
       "One search over everything the caller may read, best first: the user's memory, the "
       "scratchpads of the user's sessions in the tenant, the tenant's documents and what the "
       "user's sessions in the tenant said (never a private, recall-off or forgotten entry of "
       "another session). Each source is ranked by the retrieval core within that scope; the "
       "lists are merged by rank (``[memory] sources_rrf_k``), each hit weighted by the share "
       "of the question's words it carries; a hit under ``opts.min_coverage`` (0.25) is left "
       "out. opts: limit (10), tenant_id (unnamed: the one tenant the user's sessions are in), "
       "min_coverage. Each hit's ``id`` is what the forget methods accept."),
    _M(names.MEMORY_PLAYBOOK,
       (_P("user_id", USER_ID), _P("query", Str()),
        _P("opts", Map({"flow": Nullable(Str()), "session_id": Nullable(Id()),
                        "threshold": Nullable(COSINE), "write": Bool()}), default=dict)),
       "Playbook",
       "The playbook for this request (exact flow first, then by meaning above a threshold); "
       "with opts.session_id it is written to that session's scratchpad."),
    # --- business context ----------------------------------------------------------------
    _M(names.DOCS_ADD,
       (_P("tenant_id", TENANT_ID),
        _P("doc", Map({"content": Str(min_len=1, strip_empty=True), "doc_id": Nullable(Id()),
                       "title": Nullable(Str(max_bytes=4096)),
                       "source": Nullable(Str(max_bytes=4096)),
                       "metadata": Nullable(METADATA)}, required=("content",),
                      empty_array_ok=False))), "DocAdded",
       "Add or replace a document: doc = {content, doc_id?, title?, source?, metadata?}.",
       writes=True),
    _M(names.DOCS_SEARCH,
       (_P("tenant_id", TENANT_ID), _P("query", Str(min_len=1, strip_empty=True)),
        _P("opts", Map({"limit": Nullable(LIMIT),
                        "candidates": Nullable(Int(1, 100_000, doc="a positive integer"))}),
           default=dict)), "DocsSearch",
       "Chunks best first (~100 candidates reranked to 10); opts: limit, candidates."),
    _M(names.DOCS_LIST, (_P("tenant_id", TENANT_ID),), "DocsList",
       "The tenant's documents, and the agent.md path watched for it."),
    _M(names.DOCS_DELETE, (_P("tenant_id", TENANT_ID), _P("doc_id", Id())), "DocDeleted",
       "Delete a document and its chunks.", writes=True),
    # --- forget one thing (audited) ------------------------------------------------------
    _M(names.SESSION_REMOVE, (_P("session_id", SESSION_ID), _P("entry_id", ROW_ID)), "Removed",
       "Remove one entry (audited); summaries that linked it drop the link and say so.",
       writes=True),
    _M(names.SESSION_POP, (_P("session_id", SESSION_ID),), "Removed",
       "Remove the newest entry (audited) and return it (``removed`` is nil when the session "
       "is empty).", writes=True),
    _M(names.MEMORY_FORGET,
       (_P("user_id", USER_ID), _P("record_id", RECORD_REF),
        _P("opts", Map({"tenant_id": TENANT_ID}), default=dict)), "Forgotten",
       "Forget one user-memory record (audited).\n\n"
       "``record_id`` names what it removes: ``memory:N`` (a user-memory record: episodic, a "
       "preference, rule, playbook or summary) or ``entry:N`` / ``entry:SESSION#N`` (an entry "
       "of the user's sessions within opts.tenant_id (unnamed: the user's one tenant), as "
       "``memman_memory_search`` type ``session`` names it: it leaves its session and recall). "
       "A bare number is taken only when it names exactly one of the two; when it names both "
       "it is refused (-32602 naming ``record_id``).", writes=True),
    _M(names.DOCS_REMOVE, (_P("tenant_id", TENANT_ID), _P("ref", DOC_REF)), "DocRemoved",
       "Remove one document, by doc_id or by one of its chunk ids (audited).", writes=True),
    # --- the terminal app's views --------------------------------------------------------
    _M(names.SESSION_SERIES,
       (_P("session_id", SESSION_ID), _P("opts", Map({"limit": Nullable(COUNT)}), default=dict)),
       "Series",
       "The session's usage series, oldest first: sent and history tokens per context "
       "request, exchange and compaction; opts: limit (the newest N points)."),
    _M(names.UNDO,
       (_P("opts", Map({"client": Str(min_len=1, max_bytes=512), "session_id": Nullable(Id()),
                        "audit_id": Nullable(ROW_ID), "dry_run": Bool()}), default=dict),),
       "Undone",
       "Reverse this client's newest pin, unpin, eviction or promotion (through the audit "
       "log); opts: client, session_id, audit_id, dry_run.\n\n"
       "Returns ``{undone: <the audit record>, audit_id, result}``; -32001 when nothing is "
       "left.", writes=True),
    _M(names.CLIENTS_LIST, (), "ClientsList",
       "Every open connection: name, pid, since, requests, requests/s, subscriptions (``you`` "
       "marks the caller's own)."),
)
del _M, _P

#: method name -> its declaration
BY_NAME: dict[str, Method] = {m.name: m for m in METHODS}
if len(BY_NAME) != len(METHODS):
    raise RuntimeError("a method is declared twice in memman.api.METHODS")
