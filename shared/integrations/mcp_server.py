"""``memman mcp``: an MCP server in front of the memman daemon (official ``mcp`` Python SDK).

    memman mcp [--session ID] [--user ID] [--tenant ID] [--http [HOST:]PORT] [--no-start]

stdio by default (what Claude Code, Claude Desktop and Cursor launch); with ``--http`` it
serves streamable HTTP at ``http://HOST:PORT/mcp`` on loopback only. It is a client of the
daemon: when none answers on the socket (and ``--no-start`` is not given) it starts one in the
background as ``python -m memman_daemon``, which keeps running after the server exits.

Tools: remember, recall, search, forget, context, add, sessions. Resources:
``memman://session/{id}``, ``memman://user/{id}/memory``, ``memman://tenant/{id}/agent.md``.
The user and tenant each tool works on come from the flags, else from ``MEMMAN_MCP_USER`` /
``MEMMAN_MCP_TENANT``, else ``default``. Each server process is its own session (a new
conversation of Claude Code starts a new process): ``--session`` or ``MEMMAN_MCP_SESSION`` name
one to share, else it is named from the client's name (``clientInfo`` of ``initialize``) and
the time, e.g. ``claude-code-20261124-211503-7f3a``; what the user said in earlier sessions
reaches it through recall (``context``) and ``search``. Every tool takes ``session_id`` /
``user_id`` / ``tenant_id`` to override them for one call; ``sessions`` lists the server's user
and tenant only. A memman error comes back as an MCP tool error with memman's message (a bad
id names the id, an argument over the message limit gives the limit); the server keeps
serving, and when no daemon can be reached or started every tool says why.

Ids that tools return and ``forget`` takes name what they point at: ``memory:12`` (a user
memory record), ``snippet:SESSION#5`` (a scratchpad snippet), ``entry:SESSION#33`` (a session
entry), ``doc:DOC_ID`` (a business document), ``chunk:77`` (the document a chunk came from).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from memman import names, paths
from memman.autostart import start_daemon
from memman.errors import ConnectionLost, MemmanError
from memman.fullness import fullness
from memman.paths import daemon_answers
from memman.scope import Caller

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from pydantic import Field
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("`memman mcp` needs the MCP SDK (a dependency of memman-agent); "
                      "reinstall memman: pipx install --force memman-agent") from exc

ENV_PREFIX = "MEMMAN_MCP_"
MIN_COVERAGE = 0.25  #: search's relevance floor: share of the query's words a hit must carry
INT64_MAX = 2**63 - 1  #: ids travel as msgpack integers

INSTRUCTIONS = """memman is this agent's memory manager. Use `remember` to keep a fact, a user
preference (with key) or a rule (with condition and action); `recall` to read a preference by
key; `search` to find what was remembered and the tenant's business documents (each hit says
where it came from and carries an id); `forget` with such an id when the user asks to forget
something; `add` to log a message, tool call or tool result to the session; `context` for the
session's history fitted to a token budget; `sessions` to list sessions and their token use."""


@dataclass
class Settings:
    """Where the server connects and which scopes a call uses unless it names its own."""

    socket: str | None = None  #: the daemon socket (default: MEMMAN_SOCKET / the XDG path)
    session: str | None = None  #: None: this process's own, named at the first tool call
    user: str = "default"
    tenant: str = "default"
    http: tuple[str, int] | None = None  #: (host, port) for streamable HTTP; None = stdio
    no_start: bool = False  #: never start a daemon
    min_coverage: float = MIN_COVERAGE  #: search's relevance floor

    @classmethod
    def from_args(cls, argv: list[str] | None = None,
                  env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="memman mcp", description=(
            "An MCP server in front of the memman daemon: stdio by default, streamable HTTP "
            "on loopback with --http. Each server process is its own session of the user "
            "unless --session names one."), epilog=(
            "`memman mcp config claude-code|claude-desktop|cursor [flags]` prints a "
            "ready-to-paste config for that client, with the absolute path of this memman."))
        p.add_argument("--socket", default=None, help="daemon socket (env MEMMAN_SOCKET)")
        p.add_argument("--session", default=None,
                       help="session the tools use (env MEMMAN_MCP_SESSION; default: a new one "
                            "per server process, named from the client and the time)")
        p.add_argument("--user", default=None,
                       help="user whose memory the tools use (env MEMMAN_MCP_USER)")
        p.add_argument("--tenant", default=None,
                       help="tenant whose business context search covers (env MEMMAN_MCP_TENANT)")
        p.add_argument("--http", default=None, metavar="[HOST:]PORT",
                       help="serve streamable HTTP on loopback instead of stdio "
                            "(env MEMMAN_MCP_HTTP; port 0 picks a free one)")
        p.add_argument("--no-start", action="store_true", default=None,
                       help="do not start a daemon when none is running (env MEMMAN_MCP_NO_START)")
        p.add_argument("--min-coverage", type=float, default=None, metavar="SHARE",
                       help="search's relevance floor: the share of the query's words a hit "
                            f"must contain, 0..1 (env MEMMAN_MCP_MIN_COVERAGE, default "
                            f"{MIN_COVERAGE})")
        a = p.parse_args(argv)

        def pick(flag: str | None, var: str, default: str) -> str:
            return flag or env.get(ENV_PREFIX + var) or default

        http = a.http or env.get(ENV_PREFIX + "HTTP")
        try:
            addr = parse_http(http) if http else None
        except ValueError as exc:
            p.error(str(exc))
        no_start = a.no_start if a.no_start is not None else (
            env.get(ENV_PREFIX + "NO_START", "").lower() in ("1", "true", "yes", "on"))
        floor_text = a.min_coverage if a.min_coverage is not None else env.get(
            ENV_PREFIX + "MIN_COVERAGE")
        try:
            floor = MIN_COVERAGE if floor_text is None else float(floor_text)
        except ValueError:
            p.error(f"--min-coverage / MEMMAN_MCP_MIN_COVERAGE: expected a number 0..1, got "
                    f"{floor_text!r}")
        if not 0.0 <= floor <= 1.0:
            p.error(f"--min-coverage / MEMMAN_MCP_MIN_COVERAGE: expected 0..1, got {floor}")
        return cls(socket=a.socket, session=a.session or env.get(ENV_PREFIX + "SESSION") or None,
                   user=pick(a.user, "USER", "default"),
                   tenant=pick(a.tenant, "TENANT", "default"), http=addr, no_start=no_start,
                   min_coverage=floor)


def parse_http(value: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); loopback only."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        num = int(port)
    except ValueError:
        raise ValueError(f"--http {value!r}: the port must be a number") from None
    if not 0 <= num <= 65535:
        raise ValueError(f"--http {value!r}: the port must be 0..65535")
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ValueError(f"--http {value!r}: memman mcp serves on loopback only (127.0.0.1, "
                         "::1 or localhost); it has no authentication")
    return host, num


# --- the daemon ---------------------------------------------------------------------------


def find_socket(flag: str | None) -> Path:
    """The daemon socket: the same for the CLI, the TUI and every MCP client of one user,
    whatever the launcher's environment (``paths.socket_path``: without ``XDG_RUNTIME_DIR``, a
    stable per-user default)."""
    return paths.socket_path(flag)[0]


def message_limit() -> int:
    """The largest message the daemon takes (``[limits] max_message_bytes``)."""
    try:
        from memman.config import Config

        return int(Config.load().limits.max_message_bytes)
    except Exception:  # an unreadable config: the daemon's default
        return 8 * 1024 * 1024


def client_session_name(client: str | None, now: float | None = None) -> str:
    """``claude-code-20261124-211503-7f3a``: the client's name (letters, digits, ``-``), the
    local time and 4 random hex digits (two servers started in the same second differ)."""
    slug = re.sub(r"[^a-z0-9]+", "-", (client or "mcp").lower()).strip("-")[:40] or "mcp"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{slug}-{stamp}-{os.urandom(2).hex()}"


_READS = frozenset({names.SESSION_CONTEXT, names.SESSION_GET, names.SESSION_LIST,
                    names.SESSION_REPORT, names.MEMORY_RECALL, names.MEMORY_SEARCH,
                    names.SEARCH, names.MEMORY_LIST, names.MEMORY_STATS, names.DOCS_SEARCH, names.DOCS_LIST})


class Daemon:
    """One memman.Client, connected on first use and again after the daemon restarts."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.socket = find_socket(settings.socket)
        self._client: Any = None
        self._lock = asyncio.Lock()
        self.started_pid: int | None = None
        self.limit = message_limit()

    def ensure_running(self) -> None:
        if daemon_answers(self.socket):
            return
        if self.settings.no_start:
            raise ConnectionLost(f"no memman daemon at {self.socket} and --no-start was given; "
                                 "start one with `memman daemon`")
        self.started_pid = start_daemon(self.socket)
        print(f"memman mcp: started the memman daemon (pid {self.started_pid}) at "
              f"{self.socket}", file=sys.stderr)

    async def client(self) -> Any:
        from memman.client import Client

        async with self._lock:
            if self._client is None or self._client.closed:
                await asyncio.to_thread(self.ensure_running)
                self._client = await Client.connect(self.socket, name="memman-mcp")
            return self._client

    async def call(self, method: str, *params: Any) -> Any:
        import msgpack

        try:
            size = len(msgpack.packb([0, 0, method, list(params)], use_bin_type=True))
        except (OverflowError, ValueError, TypeError) as exc:
            raise MemmanError(-32602, f"a value cannot be sent to the daemon: {exc}") from None
        if size > self.limit:
            raise MemmanError(-32004, (
                f"the request is {size:,} bytes; the memman daemon takes at most "
                f"{self.limit:,} bytes per message ([limits] max_message_bytes). Send less "
                "text at a time"))
        try:
            return await (await self.client()).call(method, *params)
        except ConnectionLost:
            # the daemon went away mid-call: a read is tried once more on a new connection (a
            # write is not: it may have been committed before the connection broke)
            if method not in _READS:
                raise
            return await (await self.client()).call(method, *params)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


# --- the server ---------------------------------------------------------------------------

SessionArg = Annotated[str | None, Field(
    description="session id; default: the server's session (--session / MEMMAN_MCP_SESSION)")]
UserArg = Annotated[str | None, Field(
    description="user id; default: the server's user (--user / MEMMAN_MCP_USER)")]
TenantArg = Annotated[str | None, Field(
    description="tenant id; default: the server's tenant (--tenant / MEMMAN_MCP_TENANT)")]


def _tool_error(exc: MemmanError) -> ToolError:
    if isinstance(exc, ConnectionLost):
        return ToolError(f"the memman daemon is not available: {exc.message}")
    return ToolError(f"memman error {exc.code}: {exc.message}")


_NUMBER = re.compile(r"[0-9]{1,19}")


def _number(id: str, ref: str, shape: str) -> int:
    """The number of an id like ``memory:12``: ASCII digits within int64, else a ToolError
    naming the id."""
    if not _NUMBER.fullmatch(ref) or int(ref) > INT64_MAX:
        raise ToolError(f"bad id {id!r}: expected {shape}, where NUMBER is 0..{INT64_MAX} in "
                        "digits 0-9")
    return int(ref)


def _transcript(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        head = m.get("role", "?")
        if m.get("name"):
            head += f" ({m['name']})"
        if m.get("tool_call_id"):
            head += f" [result of {m['tool_call_id']}]"
        body = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            body += f"\n-> calls {fn.get('name')}({fn.get('arguments')}) [{call.get('id')}]"
        lines.append(f"{head}: {body.strip()}")
    return "\n\n".join(lines)


def build_server(settings: Settings, daemon: Daemon | None = None) -> MCPServer:
    """The MCP server with memman's tools and resources, talking to ``daemon``."""
    d = daemon or Daemon(settings)
    server = MCPServer("memman", instructions=INSTRUCTIONS, version=_version(),
                       log_level="WARNING")

    async def call(method: str, *params: Any) -> Any:
        try:
            return await d.call(method, *params)
        except MemmanError as exc:
            raise _tool_error(exc) from None

    async def owned(sid: str, user: str, tenant: str) -> None:
        """The session is this caller's (``memman.scope``: only its owner reads or writes it):
        another user's or tenant's is refused (-32002), a missing one is not found."""
        st = await call(names.SESSION_GET, sid, {"entries": False})
        if not Caller(user, tenant).owns(st.get("user_id") or "", st.get("tenant_id") or ""):
            raise ToolError(
                f"session {sid!r} belongs to user {st.get('user_id')!r} of tenant "
                f"{st.get('tenant_id')!r}, not to user {user!r} of tenant {tenant!r} "
                "(memman error -32002)")

    async def on_session(sid: str, user: str, tenant: str, method: str, *params: Any) -> Any:
        """Call ``method`` on the caller's session: opened for user/tenant when it does not
        exist yet; another owner's is refused by the open (-32002) before anything is read
        or written."""
        await call(names.SESSION_OPEN, sid, {"user_id": user, "tenant_id": tenant})
        return await call(method, *params)

    own: dict[str, str] = {}  #: this process's session, once named

    def own_session(ctx: Context | None) -> str:
        """The server's session: --session / MEMMAN_MCP_SESSION, else named once from the
        client's info (initialize's clientInfo.name) and the time."""
        if settings.session:
            return settings.session
        if "id" not in own:
            client = None
            try:
                params = ctx.request_context.session.client_params if ctx else None
                client = params.client_info.name if params is not None else None
            except Exception:  # no request context (a direct call): the generic name
                client = None
            own["id"] = client_session_name(client)
        return own["id"]

    server.memman_session = own_session  # type: ignore[attr-defined]

    def scopes(session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, ctx: Context | None = None) -> tuple[str, str, str]:
        return (session_id or own_session(ctx), user_id or settings.user,
                tenant_id or settings.tenant)

    # --- tools ---------------------------------------------------------------------------
    @server.tool(description=(
        "Remember something. With only `text`: a note in the session's scratchpad (working "
        "memory, found by `search`). With `key`: a user preference or fact, key -> text "
        "(replaces the previous value; `recall` reads it). With `condition` (and `action`, "
        "default `text`): a rule 'when condition, do action'. Returns the record's id."))
    async def remember(
        text: Annotated[str, Field(description="what to remember", min_length=1)],
        key: Annotated[str | None, Field(description="store as a user preference/fact "
                                                     "under this key, e.g. 'editor'")] = None,
        condition: Annotated[str | None, Field(description="store as a rule that applies "
                                                           "when this holds")] = None,
        action: Annotated[str | None, Field(description="the rule's action (default: text)")]
        = None,
        session_id: SessionArg = None, user_id: UserArg = None, tenant_id: TenantArg = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        sid, user, tenant = scopes(session_id, user_id, tenant_id, ctx)
        if key and condition:
            raise ToolError("give either key (a preference) or condition (a rule), not both")
        if key:
            out = await call(names.MEMORY_LEARN, user, key, text)
            rec = out["record"]
            return {"id": f"memory:{rec['id']}", "stored_as": "preference", "key": key,
                    "value": text, "user_id": user, "changed": out["changed"],
                    "previous": out["previous"]}
        if condition:
            act = action or text
            out = await call(names.MEMORY_APPEND, user, "procedural",
                             {"condition": condition, "action": act, "content": act})
            rec = out["record"]
            return {"id": f"memory:{rec['id']}", "stored_as": "rule", "condition": condition,
                    "action": act, "user_id": user}
        out = await on_session(sid, user, tenant, names.SCRATCHPAD_WRITE, sid, text,
                               {"explicit": True})
        sn = out["snippet"]
        return {"id": f"snippet:{sid}#{sn['id']}", "stored_as": "snippet", "session_id": sid,
                "text": sn["text"], "created": out["created"],
                "evicted": [f"snippet:{sid}#{i}" for i in out.get("evicted", [])]}

    @server.tool(description="Recall the user's preference or fact stored under `key` "
                             "(see remember with key). found=false when there is none.")
    async def recall(
        key: Annotated[str, Field(description="the key, e.g. 'editor'", min_length=1)],
        user_id: UserArg = None,
    ) -> dict[str, Any]:
        _, user, _ = scopes(user_id=user_id)
        out = await call(names.MEMORY_RECALL, user, key)
        if out is None:
            return {"key": key, "found": False, "user_id": user}
        return {"key": key, "found": True, "value": out["value"], "id": f"memory:{out['id']}",
                "updated_at": out["timestamp"], "user_id": user}

    @server.tool(description=(
        "Search the user's memory (preferences, rules, past events, scratchpad notes) and the "
        "tenant's business documents together. Hits are ranked best first across sources; "
        "each says where it came from and has an id that `forget` accepts."))
    async def search(
        query: Annotated[str, Field(description="words to look for", min_length=1)],
        limit: Annotated[int, Field(description="most hits to return", ge=1, le=50)] = 10,
        session_id: SessionArg = None, user_id: UserArg = None, tenant_id: TenantArg = None,
    ) -> dict[str, Any]:
        if not query.strip():
            raise ToolError("query must contain words to search for")
        user, tenant = user_id or settings.user, tenant_id or settings.tenant
        # one daemon call: the four sources are ranked and merged there (memman_search)
        out = await call(names.SEARCH, user, query,
                         {"limit": limit, "tenant_id": tenant,
                          "min_coverage": settings.min_coverage})
        return {"query": query, "hits": [{k: v for k, v in h.items() if k != "kind"}
                                         for h in out["hits"]],
                "user_id": user, "tenant_id": tenant, "below_floor": out["below_floor"],
                "ranking": out["ranking"]}

    @server.tool(description=(
        "Forget one thing by the id that remember, search, add or context returned: "
        "memory:N (a user memory record), snippet:SESSION#N (a scratchpad note), "
        "entry:SESSION#N (a session entry), doc:DOC_ID or chunk:N (a business document). "
        "The removal is written to memman's audit log."))
    async def forget(
        id: Annotated[str, Field(description="e.g. 'memory:12' or 'snippet:mcp#3'",
                                 min_length=3)],
        user_id: UserArg = None, tenant_id: TenantArg = None,
    ) -> dict[str, Any]:
        _, user, tenant = scopes(user_id=user_id, tenant_id=tenant_id)
        kind, sep, ref = id.partition(":")
        if not sep or not ref:
            raise ToolError(f"bad id {id!r}: it must look like memory:12, snippet:SESSION#3, "
                            "entry:SESSION#45, doc:DOC_ID or chunk:7")
        if kind in ("snippet", "entry"):
            sid, hash_, num = ref.rpartition("#")
            if not hash_ or not sid:
                raise ToolError(f"bad id {id!r}: expected {kind}:SESSION#NUMBER")
            n = _number(id, num, f"{kind}:SESSION#NUMBER")
            await owned(sid, user, tenant)
            if kind == "snippet":
                out = await call(names.SCRATCHPAD_EVICT, sid, n)
                return {"forgotten": id, "was_promoted": out.get("was_promoted", False)}
            out = await call(names.SESSION_REMOVE, sid, n)
            return {"forgotten": id, "content": out["removed"]["content"],
                    "summaries_relinked": [s["summary_id"] for s in out["summaries"]],
                    "audit_id": out["audit_id"]}
        if kind == "memory":
            out = await call(names.MEMORY_FORGET, user, f"memory:{_number(id, ref, 'memory:NUMBER')}",
                             {"tenant_id": tenant})
            return {"forgotten": id, "content": out["forgotten"]["content"],
                    "audit_id": out["audit_id"]}
        if kind in ("doc", "chunk"):
            target = _number(id, ref, "chunk:NUMBER") if kind == "chunk" else ref
            out = await call(names.DOCS_REMOVE, tenant, target)
            return {"forgotten": f"doc:{out['removed']['doc_id']}", "chunks": out["chunks"],
                    "audit_id": out["audit_id"]}
        raise ToolError(f"bad id {id!r}: unknown kind {kind!r}; use memory, snippet, entry, "
                        "doc or chunk")

    @server.tool(description=(
        "The session's history as the LLM should receive it now: fitted to a token budget "
        "(older stretches summarized or left out, tool calls kept with their results). "
        "format 'text' gives a transcript, 'messages' OpenAI chat messages."))
    async def context(
        max_tokens: Annotated[int | None, Field(description="token budget (default: the "
                                                            "session's, 8000)", ge=1)] = None,
        format: Annotated[Literal["text", "messages"], Field(
            description="'text' (a transcript) or 'messages' (OpenAI chat format)")] = "text",
        query: Annotated[str | None, Field(
            description="the question about to be answered: older entries about it come "
                        "back into the window (default: the newest user message)")] = None,
        session_id: SessionArg = None, user_id: UserArg = None, tenant_id: TenantArg = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        sid, user, tenant = scopes(session_id, user_id, tenant_id, ctx)
        opts: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
        if query:
            opts["query"] = query
        out = await on_session(sid, user, tenant, names.SESSION_CONTEXT, sid, opts)
        res = {"session_id": sid, "tokens": out["tokens"], "budget": out["budget"],
               "band": out["band"], "usage": out["usage"],
               "kept_entries": out["kept_entries"], "dropped_entries": out["dropped_entries"],
               "summarized_entries": out["summarized_entries"], "why": out.get("why", "")}
        if format == "messages":
            res["messages"] = out["messages"]
        else:
            res["text"] = _transcript(out["messages"])
        return res

    @server.tool(description=(
        "Append an entry to the session's log: a message (role user/assistant/system), a "
        "tool_call (assistant with tool_calls) or a tool_result (role tool with "
        "tool_call_id). memman counts its tokens once; `context` budgets them."))
    async def add(
        content: Annotated[str, Field(description="the text (may be empty for a tool call)")],
        role: Annotated[Literal["user", "assistant", "system", "tool"] | None, Field(
            description="default by type: message->user, tool_call->assistant, "
                        "tool_result->tool")] = None,
        type: Annotated[Literal["message", "tool_call", "tool_result", "context"], Field(
            description="entry type")] = "message",
        name: Annotated[str | None, Field(description="speaker or tool name")] = None,
        tool_call_id: Annotated[str | None, Field(
            description="for a tool_result: the id of the call it answers")] = None,
        tool_calls: Annotated[list[dict[str, Any]] | None, Field(
            description="for a tool_call: [{id, function: {name, arguments}}]")] = None,
        pinned: Annotated[bool, Field(description="always keep in the context")] = False,
        session_id: SessionArg = None, user_id: UserArg = None, tenant_id: TenantArg = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        sid, user, tenant = scopes(session_id, user_id, tenant_id, ctx)
        entry: dict[str, Any] = {"type": type, "content": content, "pinned": pinned}
        for k, v in (("role", role), ("name", name), ("tool_call_id", tool_call_id),
                     ("tool_calls", tool_calls)):
            if v is not None:
                entry[k] = v
        out = await on_session(sid, user, tenant, names.SESSION_ADD, sid, entry)
        return {"id": f"entry:{sid}#{out['id']}", "tokens": out["tokens"], "session_id": sid}

    @server.tool(description="List the user's memman sessions (of the server's user and "
                             "tenant) with their token use against their budget, newest "
                             "activity first; `current` marks this conversation's.")
    async def sessions(user_id: UserArg = None, tenant_id: TenantArg = None,
                       ctx: Context | None = None) -> dict[str, Any]:
        filt = {"user_id": user_id or settings.user, "tenant_id": tenant_id or settings.tenant}
        current = own_session(ctx)
        rows = await call(names.SESSION_LIST, filt)
        rows.sort(key=lambda r: -r["updated_at"])
        points = await asyncio.gather(*[
            call(names.SESSION_SERIES, r["session_id"], {"limit": 20}) for r in rows])
        # how full, as the TUI and `memman sessions` say it (memman.fullness)
        full = [fullness(r, p["points"]).to_json() for r, p in zip(rows, points, strict=True)]
        return {"sessions": [{
            "session_id": r["session_id"], "user_id": r["user_id"], "tenant_id": r["tenant_id"],
            "active_tokens": r["active_tokens"], "max_tokens": r["max_tokens"],
            "usage": f["sent_usage"], "history_usage": f["history_usage"],
            "last_request": f["last_request"],
            "entries": r["entries"], "summaries": r["summaries"],
            "updated_at": r["updated_at"], "current": r["session_id"] == current}
            for r, f in zip(rows, full, strict=True)], "user_id": filt["user_id"],
            "tenant_id": filt["tenant_id"]}

    # --- resources -----------------------------------------------------------------------
    async def read(method: str, *params: Any) -> Any:
        try:
            return await d.call(method, *params)
        except MemmanError as exc:
            raise ResourceError(f"memman error {exc.code}: {exc.message}") from None

    @server.resource("memman://session/{id}", mime_type="text/plain",
                     description="The session's memory report: state, what the agent "
                                 "receives now, what was dropped and why")
    async def session_report(id: str) -> str:
        st = await read(names.SESSION_GET, id, {"entries": False})
        if not Caller(settings.user, settings.tenant).owns(st.get("user_id") or "",
                                                           st.get("tenant_id") or ""):
            raise ResourceError(f"memman error -32002: session {id!r} is not user "
                                f"{settings.user!r}'s in tenant {settings.tenant!r}")
        return (await read(names.SESSION_REPORT, id, {}))["text"]

    @server.resource("memman://user/{id}/memory", mime_type="text/markdown",
                     description="The user's memory: preferences, rules, playbooks and the "
                                 "newest past events")
    async def user_memory(id: str) -> str:
        stats, sem, proc, epi = await asyncio.gather(
            read(names.MEMORY_STATS, id), read(names.MEMORY_LIST, id, "semantic", {}),
            read(names.MEMORY_LIST, id, "procedural", {}),
            read(names.MEMORY_LIST, id, "episodic", {"limit": 20}))
        out = [f"# Memory of user {id}", "",
               f"{stats['semantic_entry_count']} preferences, {stats['procedural_rule_count']} "
               f"rules, {stats['playbook_count']} playbooks, {stats['episodic_entry_count']} "
               f"past events, {stats['working_snippets']} scratchpad notes", "",
               "## Preferences"]
        out += [f"- {r['key']}: {r['content']}  (memory:{r['id']})" for r in sem["records"]]
        out += ["", "## Rules and playbooks"]
        out += [f"- when {r['key']}: {r['content']}  (memory:{r['id']})"
                for r in proc["records"]]
        out += ["", "## Newest past events"]
        out += [f"- {r['content']}  (memory:{r['id']})" for r in epi["records"]]
        return "\n".join(out) + "\n"

    @server.resource("memman://tenant/{id}/agent.md", mime_type="text/markdown",
                     description="The tenant's agent.md: hand-written business context")
    async def agent_md(id: str) -> str:
        listing = await read(names.DOCS_LIST, id)
        path = Path(listing["agent_md"])
        try:
            return await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return f"# agent.md\n\n(tenant {id} has no agent.md yet; it would live at {path})\n"

    server.memman_daemon = d  # type: ignore[attr-defined]
    return server


def _version() -> str:
    from memman import __version__

    return __version__


async def serve(settings: Settings) -> None:
    daemon = Daemon(settings)
    server = build_server(settings, daemon)
    try:
        await asyncio.to_thread(daemon.ensure_running)
    except MemmanError as exc:  # serve anyway: every tool says why (and tries again)
        print(f"memman mcp: {exc.message}", file=sys.stderr, flush=True)
    try:
        if settings.http is None:
            await run_stdio(server)
        else:
            await serve_http(server, *settings.http)
    finally:
        await daemon.close()


async def run_stdio(server: MCPServer) -> None:
    """``MCPServer.run_stdio_async`` with every request answered. The SDK's stdio reader drops a
    line it cannot parse (a lone surrogate such as ``\\ud800``, JSON nested past the parser's
    limit): it hands the server the exception, which only logs it, so the client waited for
    that request forever. The read side is wrapped so such a line gets a JSON-RPC error for the
    request id it carries."""
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # what run_stdio_async runs; the SDK has no public handle
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(AnsweredReads(read_stream, write_stream), write_stream,
                           lowlevel.create_initialization_options())


class AnsweredReads:
    """A transport's read side that answers, instead of passing on, the lines its reader could
    not parse: -32700 (or -32600 for JSON that is no JSON-RPC message) for the id the line
    carries, ``null`` when none can be found."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            answer = unparsed_line_error(item)
            if answer is not None:
                await self._write.send(answer)

    def __aiter__(self) -> AnsweredReads:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> AnsweredReads:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def unparsed_line_error(exc: Exception) -> Any:
    """The ``SessionMessage`` answering a line the SDK's reader could not parse, or None when
    the exception carries no line (then there is nothing to answer)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    errors = getattr(exc, "errors", None)
    details = errors() if callable(errors) else []
    line = details[0].get("input") if details else None
    if not isinstance(line, str):
        return None
    reason = str(details[0].get("msg", exc))
    if details[0].get("type") == "json_invalid":
        code = types.PARSE_ERROR
        if "escape" in reason or "surrogate" in reason:
            reason += (" (text must be Unicode: a lone surrogate escape such as \\ud800 is "
                       "not a character; send U+FFFD or drop it)")
        elif "recursion" in reason:
            reason += " (the JSON is nested too deep to parse)"
    else:
        code = types.INVALID_REQUEST
    error = types.JSONRPCError(jsonrpc="2.0", id=top_level_id(line),
                               error=types.ErrorData(code=code, message=reason))
    return SessionMessage(error)


def top_level_id(line: str) -> int | str | None:
    """The ``id`` member of the JSON object on ``line``, read without parsing the rest (which
    may not parse): a linear scan keeping only the nesting depth and whether it is in a string."""
    depth, i, n = 0, 0, len(line)
    expect_key = False
    while i < n:
        c = line[i]
        if c == '"':
            end = i + 1
            while end < n and line[end] != '"':
                end += 2 if line[end] == "\\" else 1
            if depth == 1 and expect_key and line[i + 1:end] == "id":
                m = _ID_VALUE.match(line, end + 1)
                if m is not None:
                    num, text = m.group(1), m.group(2)
                    return int(num) if num is not None else text
            expect_key = False
            i = end + 1
            continue
        if c in "{[":
            depth += 1
            expect_key = c == "{" and depth == 1
        elif c in "}]":
            depth -= 1
        elif c == "," and depth == 1:
            expect_key = True
        i += 1
    return None


_ID_VALUE = re.compile(r'\s*:\s*(?:(-?\d+)(?![.\deE])|"((?:[^"\\]|\\.){0,512})")')


def loopback_security(host: str, port: int) -> Any:
    """DNS-rebinding protection for every loopback bind (127.0.0.2, ::1, localhost, ... alike):
    the Host header must name a loopback address at this port and an Origin, when sent, must
    be such an address too; anything else is refused (421 / 403)."""
    from mcp.server.transport_security import TransportSecuritySettings

    shown = f"[{host}]" if ":" in host else host
    hosts = sorted({f"{h}:{port}" for h in (shown, "127.0.0.1", "localhost", "[::1]")})
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts])


async def serve_http(server: MCPServer, host: str, port: int) -> None:
    """Streamable HTTP at http://host:port/mcp; the bound address is printed to stderr."""
    import uvicorn

    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(fam, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConnectionLost(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick "
                             "another port with --http, or 0 for a free one") from None
    sock.listen(128)  # connections wait in the backlog from the moment the URL is printed
    bound = sock.getsockname()[1]
    daemon = getattr(server, "memman_daemon", None)
    limit = daemon.limit if daemon is not None else 8 * 1024 * 1024
    # a body up to 4x the daemon's message limit reaches the tools, which name the limit
    app = server.streamable_http_app(host=host,
                                     transport_security=loopback_security(host, bound),
                                     max_request_body_size=max(4 * 1024 * 1024, 4 * limit))
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    shown = f"[{host}]" if fam == socket.AF_INET6 else host
    print(f"memman mcp: streamable HTTP at http://{shown}:{bound}/mcp", file=sys.stderr,
          flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


CLIENTS = ("claude-code", "claude-desktop", "cursor")


def launcher(argv0: str | None = None) -> list[str]:
    """The absolute command that runs this memman: the ``memman`` script being run, else this
    Python with ``-m memman_cli`` (run from a checkout with ``python -m``)."""
    arg = argv0 if argv0 is not None else sys.argv[0]
    found = shutil.which(arg) if os.sep not in arg else arg
    if found:
        path = Path(found).absolute()
        if path.name.startswith("memman") and path.suffix != ".py" and os.access(path, os.X_OK):
            return [str(path)]
    return [str(Path(sys.executable).absolute()), "-m", "memman_cli"]


def client_config(client: str, argv: list[str], argv0: str | None = None) -> tuple[str, str]:
    """A ready-to-paste config that starts ``memman mcp`` for ``client`` with the absolute
    path of the running executable (``argv``: ``memman mcp`` flags to pass on), and where it
    goes."""
    cmd = [*launcher(argv0), "mcp", *argv]
    env = {k: os.environ[k] for k in ("MEMMAN_SOCKET", "MEMMAN_DATA_DIR", "MEMMAN_CONFIG")
           if os.environ.get(k)}
    if client == "claude-code":
        import shlex

        envs = " ".join(f"-e {k}={shlex.quote(v)}" for k, v in env.items())
        return (f"claude mcp add memman {envs + ' ' if envs else ''}-- "
                + " ".join(shlex.quote(c) for c in cmd)), "run this in a shell"
    import json

    entry: dict[str, Any] = {"command": cmd[0], "args": cmd[1:]}
    if env:
        entry["env"] = env
    where = ("claude_desktop_config.json (Claude Desktop: Settings > Developer > Edit Config)"
             if client == "claude-desktop" else
             ".cursor/mcp.json in the project, or ~/.cursor/mcp.json for every project")
    return json.dumps({"mcpServers": {"memman": entry}}, indent=2, ensure_ascii=False), where


def config_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="memman mcp config", description=(
            "Print a ready-to-paste config that starts `memman mcp` for an MCP client, with "
            "the absolute path of this memman. Flags after the client are passed to `memman "
            "mcp` (e.g. --user ana --tenant acme)."))
    p.add_argument("client", choices=CLIENTS)
    a, rest = p.parse_known_args(argv)
    Settings.from_args(rest, env={})  # the flags must be ones memman mcp takes
    text, where = client_config(a.client, rest)
    print(f"# {where}:", file=sys.stderr)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "config" in argv[:1] or argv[2:3] == ["config"] and argv[:1] == ["--socket"]:
        if argv[0] == "--socket":  # memman --socket PATH mcp config ...
            os.environ["MEMMAN_SOCKET"] = argv[1]
            argv = argv[2:]
        return config_main(argv[1:])
    settings = Settings.from_args(argv)
    try:
        asyncio.run(serve(settings))
    except ConnectionLost as exc:
        print(f"memman mcp: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
