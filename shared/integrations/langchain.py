"""memman as a LangChain chat message history.

    from memman.integrations.langchain import MemmanChatMessageHistory

    history = MemmanChatMessageHistory("support-42", user_id="ana")
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    history.messages          # -> [HumanMessage("hi"), AIMessage("hello")]

``MemmanChatMessageHistory`` implements ``langchain_core.chat_history.BaseChatMessageHistory``
(``messages``, ``add_messages``, ``clear`` and their async variants). Each message is one typed
memman entry — a ``HumanMessage`` a user message, an ``AIMessage`` with ``tool_calls`` a
``tool_call`` entry, a ``ToolMessage`` a ``tool_result`` — and the message itself is kept in
the entry's metadata (``message_to_dict``), so ``messages`` returns what was added. With
``max_tokens=`` ``messages`` is memman's budgeted context instead (older stretches as their
summaries), converted with ``langchain_core.messages.convert_to_messages``.

Needs ``langchain-core``: ``pip install 'memman-agent[langchain]'``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from memman import names
from memman.errors import NOT_FOUND, ConnectionLost, MemmanError

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ToolMessage,
        convert_to_messages,
        message_to_dict,
        messages_from_dict,
    )
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("MemmanChatMessageHistory needs langchain-core: "
                      "pip install 'memman-agent[langchain]'") from exc

MESSAGE_KEY = "lc_message"  #: where the original message is kept in an entry's metadata
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
          "function": "tool", "chat": "user"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content
                         if isinstance(p, str) or isinstance(p, dict))
    return str(content)


def message_to_entry(message: BaseMessage) -> dict[str, Any]:
    """One LangChain message -> one memman entry (the message kept in metadata)."""
    meta = {MESSAGE_KEY: json.loads(json.dumps(message_to_dict(message), default=str))}
    content = _text(message.content)
    if isinstance(message, ToolMessage):
        return {"type": "tool_result", "role": "tool", "content": content,
                "tool_call_id": message.tool_call_id, "metadata": meta}
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = [{"id": c.get("id") or f"call_{i}",
                  "function": {"name": c["name"],
                               "arguments": json.dumps(c.get("args", {}))}}
                 for i, c in enumerate(message.tool_calls)]
        return {"type": "tool_call", "role": "assistant", "content": content,
                "tool_calls": calls, "metadata": meta}
    role = _ROLES.get(message.type, "user")
    if role == "tool":  # a FunctionMessage: no call id to pair it with
        role = "assistant"
    entry: dict[str, Any] = {"type": "message", "role": role, "content": content,
                             "metadata": meta}
    if message.name:
        entry["name"] = message.name
    return entry


def entry_to_message(entry: dict[str, Any]) -> BaseMessage:
    stored = (entry.get("metadata") or {}).get(MESSAGE_KEY)
    if isinstance(stored, dict):
        return messages_from_dict([stored])[0]
    msg: dict[str, Any] = {"role": entry["role"], "content": entry.get("content") or ""}
    if entry.get("tool_calls"):
        msg["tool_calls"] = entry["tool_calls"]
    if entry.get("tool_call_id"):
        msg["tool_call_id"] = entry["tool_call_id"]
    return convert_to_messages([msg])[0]


class MemmanChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history stored in the memman daemon.

    ``session_id``: the memman session (opened on first use with ``user_id``, ``tenant_id``,
    ``model`` when given). ``max_tokens``: when set, ``messages`` is the budgeted context.
    ``socket``: the daemon socket (default: ``MEMMAN_SOCKET`` / the usual path).
    """

    def __init__(self, session_id: str, *, user_id: str | None = None,
                 tenant_id: str | None = None, model: str | None = None,
                 max_tokens: int | None = None, socket: str | None = None) -> None:
        if max_tokens is not None and max_tokens <= 0:
            raise ValueError("max_tokens must be a positive number of tokens")
        self.session_id = session_id
        self.max_tokens = max_tokens
        self._open_opts = {k: v for k, v in (("user_id", user_id), ("tenant_id", tenant_id),
                                             ("model", model)) if v is not None}
        self._socket = socket
        self._client: Any = None
        self._lock = threading.Lock()  # the async variants run the sync ones in threads
        self._opened = False

    def _call(self, method: str, *params: Any) -> Any:
        from memman.sync_client import SyncClient

        with self._lock:
            if self._client is None:
                self._client = SyncClient(self._socket, name="memman-langchain")
            if not self._opened:
                self._client.call(names.SESSION_OPEN, self.session_id, self._open_opts)
                self._opened = True
            try:
                return self._client.call(method, *params)
            except ConnectionLost:  # the daemon went away: the next call connects again
                self._client.close()
                self._client, self._opened = None, False
                raise
            except MemmanError as exc:  # deleted meanwhile: open it again
                if exc.code != NOT_FOUND or "session" not in exc.message:
                    raise
                self._client.call(names.SESSION_OPEN, self.session_id, self._open_opts)
                return self._client.call(method, *params)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The history, oldest first (the budgeted context when ``max_tokens`` is set)."""
        if self.max_tokens is not None:
            ctx = self._call(names.SESSION_CONTEXT, self.session_id,
                             {"max_tokens": self.max_tokens})
            return list(convert_to_messages(ctx["messages"]))
        got = self._call(names.SESSION_GET, self.session_id, {})
        return [entry_to_message(e) for e in got["entries"]]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append each message as one typed entry (each answered after it is committed)."""
        for m in messages:
            self._call(names.SESSION_ADD, self.session_id, message_to_entry(m))

    def clear(self) -> None:
        """Remove every message (the session itself stays)."""
        self._call(names.SESSION_CLEAR, self.session_id)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
