"""memman as the OpenAI Agents SDK's session memory.

    from agents import Agent, Runner
    from memman.integrations.openai_agents import MemmanSession

    session = MemmanSession("support-42", user_id="ana", max_tokens=4000)
    result = await Runner.run(agent, "hello", session=session)

``MemmanSession`` implements the Agents SDK ``Session`` protocol (``get_items(limit)``,
``add_items``, ``pop_item``, ``clear_session``). Every item is stored as one typed memman
entry, so budgeting, summaries, the TUI and ``memman show`` see the conversation:

========================== =====================================================
Agents SDK item            memman entry
========================== =====================================================
user / system / developer  ``message`` (role user / system)
assistant message          ``message`` (role assistant, the output text joined)
``function_call``          ``tool_call`` (assistant, ``tool_calls`` = [the call])
``function_call_output``   ``tool_result`` (role tool, ``tool_call_id``)
anything else (reasoning)  ``context`` (role system, a one-line description)
========================== =====================================================

The item itself is kept in the entry's ``metadata.agents_item``, so ``get_items()`` returns
exactly what was added. With ``max_tokens=`` (a token budget), ``get_items()`` returns
memman's budgeted context instead: the history fitted to the budget, older stretches as
their summaries, tool calls with their results, converted back to items. ``pop_item()``
removes the newest entry (``memman_session_pop``, audited).

Needs the Agents SDK: ``pip install 'memman-agent[agents]'``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from memman import names
from memman.errors import NOT_FOUND, ConnectionLost, MemmanError

try:
    from agents.memory import SessionSettings
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("MemmanSession needs the OpenAI Agents SDK: "
                      "pip install 'memman-agent[agents]'") from exc

ITEM_KEY = "agents_item"  #: where the original item is kept in an entry's metadata


def _plain(item: Any) -> dict[str, Any]:
    """The item as plain JSON data (the SDK may hand over pydantic models)."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(exclude_unset=True)
    return json.loads(json.dumps(item, default=str))


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict):
                parts.append(p.get("text") or p.get("refusal") or
                             (f"[{p.get('type')}]" if p.get("type") else ""))
            else:
                parts.append(str(p))
        return "\n".join(x for x in parts if x)
    return str(content)


def item_to_entry(item: Any) -> dict[str, Any]:
    """One Agents SDK input item -> one memman entry (the item kept in metadata)."""
    it = _plain(item)
    kind = it.get("type")
    meta = {ITEM_KEY: it}
    if kind == "function_call":
        return {"type": "tool_call", "role": "assistant", "content": "", "metadata": meta,
                "tool_calls": [{"id": it.get("call_id") or it.get("id") or "call",
                                "function": {"name": it.get("name", ""),
                                             "arguments": it.get("arguments") or "{}"}}]}
    if kind == "function_call_output":
        out = it.get("output")
        return {"type": "tool_result", "role": "tool", "metadata": meta,
                "tool_call_id": it.get("call_id") or "call",
                "content": out if isinstance(out, str) else _text(out) or json.dumps(out)}
    role = it.get("role")
    if role in ("user", "assistant", "system", "developer") and kind in (None, "message"):
        return {"type": "message", "role": "system" if role == "developer" else role,
                "content": _text(it.get("content")), "metadata": meta}
    summary = _text(it.get("summary") or it.get("content")) or ""
    return {"type": "context", "role": "system", "metadata": meta,
            "content": f"[{kind or 'item'}] {summary}".strip()}


def entry_to_item(entry: dict[str, Any]) -> dict[str, Any]:
    """A memman entry -> the item it was made from (or one made from the entry)."""
    item = (entry.get("metadata") or {}).get(ITEM_KEY)
    if isinstance(item, dict):
        return item
    return messages_to_items([_chat(entry)])[0]


def _chat(entry: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": entry["role"], "content": entry.get("content") or ""}
    if entry.get("tool_calls"):
        msg["tool_calls"] = entry["tool_calls"]
    if entry.get("tool_call_id"):
        msg["tool_call_id"] = entry["tool_call_id"]
    return msg


def messages_to_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (memman's context) -> Agents SDK input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        content = _text(m.get("content"))
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"),
                          "output": content})
            continue
        if content or not m.get("tool_calls"):
            items.append({"role": role, "content": content})
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            items.append({"type": "function_call", "call_id": call.get("id"),
                          "name": fn.get("name", ""), "arguments": fn.get("arguments") or "{}"})
    return items


class MemmanSession:
    """An Agents SDK ``Session`` stored in the memman daemon.

    ``session_id``: the memman session (opened on first use with ``user_id``, ``tenant_id``,
    ``model`` when given). ``max_tokens``: when set, ``get_items`` returns the budgeted
    context (that many tokens) instead of the raw log. ``socket``: the daemon socket (default:
    ``MEMMAN_SOCKET`` / the usual path); or pass a connected ``memman.Client`` as ``client``.
    """

    def __init__(self, session_id: str, *, user_id: str | None = None,
                 tenant_id: str | None = None, model: str | None = None,
                 max_tokens: int | None = None, socket: str | None = None,
                 client: Any = None, session_settings: SessionSettings | None = None) -> None:
        if max_tokens is not None and max_tokens <= 0:
            raise ValueError("max_tokens must be a positive number of tokens")
        self.session_id = session_id
        self.session_settings = session_settings
        self.max_tokens = max_tokens
        self._open_opts = {k: v for k, v in (("user_id", user_id), ("tenant_id", tenant_id),
                                             ("model", model)) if v is not None}
        self._socket = socket
        self._client = client
        self._own_client = client is None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opened = False

    # --- the connection ------------------------------------------------------------------
    async def _conn(self) -> Any:
        from memman.client import Client

        loop = asyncio.get_running_loop()
        if self._own_client and (self._client is None or self._client.closed
                                 or self._loop is not loop):
            # a client belongs to one event loop (Runner.run_sync makes a new one per run)
            self._client = await Client.connect(self._socket, name="memman-agents")
            self._loop = loop
        return self._client

    async def _call(self, method: str, *params: Any) -> Any:
        if not self._opened:
            await (await self._conn()).call(names.SESSION_OPEN, self.session_id,
                                            self._open_opts)
            self._opened = True
        try:
            return await (await self._conn()).call(method, *params)
        except ConnectionLost:
            # the daemon went away: the next call connects again; a read is retried now (a
            # write is not: it may have been committed before the connection broke)
            self._client = None if self._own_client else self._client
            if method not in (names.SESSION_GET, names.SESSION_CONTEXT):
                raise
            return await (await self._conn()).call(method, *params)
        except MemmanError as exc:  # deleted meanwhile: open it again
            if exc.code != NOT_FOUND or "session" not in exc.message:
                raise
            await (await self._conn()).call(names.SESSION_OPEN, self.session_id,
                                            self._open_opts)
            return await (await self._conn()).call(method, *params)

    async def close(self) -> None:
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None

    # --- the Session protocol ------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history, oldest first; ``limit``: only the newest that many items. With
        ``max_tokens`` set, the budgeted context (what fits, summaries for the rest)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if self.max_tokens is not None:
            ctx = await self._call(names.SESSION_CONTEXT, self.session_id,
                                   {"max_tokens": self.max_tokens})
            items = messages_to_items(ctx["messages"])
        else:
            opts = {"limit": limit} if limit else {}
            got = await self._call(names.SESSION_GET, self.session_id, opts)
            items = [entry_to_item(e) for e in got["entries"]]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: list[Any]) -> None:
        """Append each item as one typed entry (each answered after it is committed)."""
        for item in items:
            await self._call(names.SESSION_ADD, self.session_id, item_to_entry(item))

    async def pop_item(self) -> Any | None:
        """Remove the newest item and return it (None when the session is empty)."""
        out = await self._call(names.SESSION_POP, self.session_id)
        return entry_to_item(out["removed"]) if out["removed"] else None

    async def clear_session(self) -> None:
        """Remove every item (the session itself stays)."""
        await self._call(names.SESSION_CLEAR, self.session_id)
