"""MemmanChatMessageHistory against LangChain's own expectations, on a real daemon.

langchain-tests ships no standard suite for chat histories, so the reference is LangChain's
own: the contract in ``BaseChatMessageHistory``'s docstring, the behaviour of its in-memory
reference implementation (every sequence of operations must give the same messages), the
``str()`` shape langchain-app's own test asserts, and ``RunnableWithMessageHistory`` (the
LangChain consumer of a history) driving it through a chat model."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from memman.integrations.langchain import MemmanChatMessageHistory
from memman.sync_client import SyncClient
from tests.helpers import DaemonProcess, daemon_process

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langchain_core.chat_history import InMemoryChatMessageHistory


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    with daemon_process() as dp:
        yield dp


def _reference() -> BaseChatMessageHistory:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InMemoryChatMessageHistory()


CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are terse."),
    HumanMessage("What is 2+2?", id="h1"),
    AIMessage("", tool_calls=[{"name": "calc", "args": {"expr": "2+2"}, "id": "t1"}]),
    ToolMessage("4", tool_call_id="t1"),
    AIMessage("4.", response_metadata={"model": "m"}),
    HumanMessage([{"type": "text", "text": "and 3+3?"}]),
]


def test_is_a_base_chat_message_history(daemon: DaemonProcess) -> None:
    h = MemmanChatMessageHistory("lc-type", socket=str(daemon.socket))
    assert isinstance(h, BaseChatMessageHistory)
    assert h.messages == []  # a new session is empty


def test_same_messages_as_the_in_memory_reference(daemon: DaemonProcess) -> None:
    ours = MemmanChatMessageHistory("lc-ref", user_id="ana", socket=str(daemon.socket))
    ref = _reference()
    for h in (ours, ref):
        h.add_messages(CONVERSATION[:3])
        h.add_message(CONVERSATION[3])
        h.add_messages(CONVERSATION[4:])
        h.add_user_message("plain text user")
        h.add_ai_message("plain text ai")
    assert ours.messages == ref.messages  # order, types, content, ids, tool calls
    assert [type(m) for m in ours.messages] == [SystemMessage, HumanMessage, AIMessage,
                                                ToolMessage, AIMessage, HumanMessage,
                                                HumanMessage, AIMessage]
    assert str(ours) == str(ref)
    # a fresh object over the same session reads the same (it is stored, not cached)
    again = MemmanChatMessageHistory("lc-ref", socket=str(daemon.socket))
    assert again.messages == ref.messages
    for h in (ours, ref):
        h.clear()
    assert ours.messages == ref.messages == []
    ours.add_messages([HumanMessage("after clear")])
    assert [m.content for m in again.messages] == ["after clear"]


def test_str_shape_from_langchain_core_tests(daemon: DaemonProcess) -> None:
    history = MemmanChatMessageHistory("lc-str", socket=str(daemon.socket))
    history.add_message(SystemMessage(content="system"))
    history.add_message(HumanMessage(content="human 1"))
    history.add_message(AIMessage(content="ai"))
    assert str(history) == "System: system\nHuman: human 1\nAI: ai"


async def test_async_variants(daemon: DaemonProcess) -> None:
    h = MemmanChatMessageHistory("lc-async", socket=str(daemon.socket))
    await h.aadd_messages([HumanMessage("a"), AIMessage("b")])
    assert [m.content for m in await h.aget_messages()] == ["a", "b"]
    await h.aclear()
    assert await h.aget_messages() == []


def test_stored_as_typed_entries(daemon: DaemonProcess) -> None:
    h = MemmanChatMessageHistory("lc-typed", user_id="bo", socket=str(daemon.socket))
    h.add_messages(CONVERSATION)
    with SyncClient(daemon.socket) as mm:
        s = mm.session_get("lc-typed")
        assert s["user_id"] == "bo"
        assert [(e["type"], e["role"]) for e in s["entries"]] == [
            ("message", "system"), ("message", "user"), ("tool_call", "assistant"),
            ("tool_result", "tool"), ("message", "assistant"), ("message", "user")]
        assert s["entries"][2]["tool_calls"][0]["function"]["arguments"] == '{"expr": "2+2"}'
        assert s["entries"][5]["content"] == "and 3+3?"
        # entries written by another client come back as LangChain messages too
        mm.session_add("lc-typed", {"role": "assistant", "content": "6."})
    assert h.messages[-1] == AIMessage("6.")


def _settled(mm: SyncClient, timeout: float = 120.0) -> None:
    """Wait until the daemon's background work for the log is done: every entry's search
    vector embedded and every entry analysed (``memman_stats``)."""
    deadline = time.monotonic() + timeout
    while True:
        st = mm.call("memman_stats")
        if not st["recall"]["pending_vectors"] and not st["session_engine"]["analysis_pending"]:
            return
        assert time.monotonic() < deadline, f"background work still pending: {st['recall']}"
        time.sleep(0.05)


def test_budgeted_messages(daemon: DaemonProcess) -> None:
    h = MemmanChatMessageHistory("lc-budget", socket=str(daemon.socket))
    h.add_messages([HumanMessage(f"question {i} " + "words " * 50) if i % 2 == 0 else
                    AIMessage(f"answer {i} " + "words " * 50) for i in range(30)])
    with SyncClient(daemon.socket) as mm:
        _settled(mm)  # the window ranks by vectors once they exist: compare two settled reads
    small = MemmanChatMessageHistory("lc-budget", max_tokens=500, socket=str(daemon.socket))
    window = small.messages
    assert 0 < len(window) < 30
    with SyncClient(daemon.socket) as mm:  # exactly memman's budgeted context
        ctx = mm.session_context("lc-budget", {"max_tokens": 500})
        assert ctx["tokens"] <= 500 < mm.session_get("lc-budget")["active_tokens"]
    assert [(m.type, m.content) for m in window] == [
        ({"user": "human", "assistant": "ai"}.get(m["role"], m["role"]), m["content"])
        for m in ctx["messages"]]


def test_runnable_with_message_history(daemon: DaemonProcess) -> None:
    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."),
                                               MessagesPlaceholder("history"),
                                               ("human", "{question}")])
    model = FakeListChatModel(responses=["Paris.", "You asked about France."])
    seen: list[list[BaseMessage]] = []

    def record(value):  # what the model receives
        seen.append(value.to_messages())
        return value

    chain = RunnableWithMessageHistory(
        prompt | record | model,
        lambda session_id: MemmanChatMessageHistory(session_id, socket=str(daemon.socket)),
        input_messages_key="question", history_messages_key="history")
    cfg = {"configurable": {"session_id": "lc-chain"}}
    assert chain.invoke({"question": "Capital of France?"}, cfg).content == "Paris."
    assert chain.invoke({"question": "What did I ask?"}, cfg).content == \
        "You asked about France."
    assert [m.content for m in seen[1]] == ["Be brief.", "Capital of France?", "Paris.",
                                            "What did I ask?"]
    stored = MemmanChatMessageHistory("lc-chain", socket=str(daemon.socket)).messages
    assert [type(m) for m in stored] == [HumanMessage, AIMessage, HumanMessage, AIMessage]


def test_another_user_is_refused_not_silently_made_owner(daemon: DaemonProcess) -> None:
    from memman.errors import CONFLICT, MemmanError

    ana = MemmanChatMessageHistory("lc-owned", user_id="ana", socket=str(daemon.socket))
    ana.add_messages([HumanMessage("my locker code is 2231")])
    bob = MemmanChatMessageHistory("lc-owned", user_id="bob", socket=str(daemon.socket))
    with pytest.raises(MemmanError) as err:
        _ = bob.messages
    assert err.value.code == CONFLICT and "belongs to user 'ana'" in err.value.message
    with pytest.raises(MemmanError):
        bob.clear()
    assert [m.content for m in ana.messages] == ["my locker code is 2231"]
    with SyncClient(str(daemon.socket)) as c:
        assert c.session_get("lc-owned")["user_id"] == "ana"
    ana.close()
    bob.close()
