"""The OpenAI Agents SDK's own Runner with MemmanSession as its session, against a real daemon
(a subprocess) and an OpenAI-compatible server on 127.0.0.1 (tests/llm_server.py) that asks
for a tool call and then answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session
from openai import AsyncOpenAI

from memman.integrations.openai_agents import MemmanSession, item_to_entry
from memman.sync_client import SyncClient
from tests.helpers import daemon_env, daemon_process
from tests.llm_server import LLMServer

MEMMAN = str(Path(sys.executable).with_name("memman"))


def scripted(body: dict[str, Any]) -> dict[str, Any]:
    """Turn 1: ask for the weather tool, then answer from its result. Turn 2: answer from
    what the history holds (so the reply shows whether the first turn was sent)."""
    msgs = body["messages"]
    last = msgs[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"The tool says: {last['content']}."}
    if "weather" in str(last.get("content")):
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_w1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}}]}
    seen = " | ".join(str(m.get("content")) for m in msgs if m["role"] == "tool")
    return {"role": "assistant", "content": f"Earlier tool output: {seen or 'none'}"}


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 21C and sunny"


def make_agent(base_url: str) -> Agent:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
    return Agent(name="assistant", instructions="Answer briefly.", model=model,
                 tools=[get_weather])


async def test_runner_two_turns_with_a_tool_call_pop_and_memman_show() -> None:
    with daemon_process() as dp, LLMServer() as llm:
        llm.respond = scripted
        agent = make_agent(llm.base_url)
        session = MemmanSession("agents-demo", user_id="ana", socket=str(dp.socket))
        assert isinstance(session, Session)  # the SDK's runtime-checkable protocol

        first = await Runner.run(agent, "What's the weather in Oslo?", session=session)
        assert first.final_output == "The tool says: Oslo: 21C and sunny."
        second = await Runner.run(agent, "What did the tool tell you before?", session=session)
        # the second turn saw the first: its request carried turn 1's messages and tool result
        turn2 = llm.chat_requests()[-1]["messages"]
        assert any(m["role"] == "user" and m["content"] == "What's the weather in Oslo?"
                   for m in turn2)
        assert any(m.get("tool_calls") and m["tool_calls"][0]["id"] == "call_w1" for m in turn2)
        assert second.final_output == "Earlier tool output: Oslo: 21C and sunny"

        items = await session.get_items()
        kinds = [i.get("type") or i["role"] for i in items]
        assert kinds == ["user", "function_call", "function_call_output", "message",
                         "user", "message"]
        assert (await session.get_items(limit=2))[0]["content"] == \
            "What did the tool tell you before?"
        # stored as typed entries, tool calls and results included
        with SyncClient(dp.socket) as mm:
            entries = mm.session_get("agents-demo")["entries"]
            assert [e["type"] for e in entries] == ["message", "tool_call", "tool_result",
                                                    "message", "message", "message"]
            assert entries[1]["tool_calls"][0]["function"]["name"] == "get_weather"
            assert entries[2]["tool_call_id"] == "call_w1" and entries[0]["role"] == "user"
            assert mm.session_get("agents-demo")["user_id"] == "ana"

        # pop_item removes the newest item and returns it
        newest = items[-1]
        popped = await session.pop_item()
        assert popped == newest
        assert await session.get_items() == items[:-1]

        # the session is visible to `memman show`
        shown = subprocess.run([MEMMAN, "--socket", str(dp.socket), "show", "agents-demo"],
                               capture_output=True, text=True, env=daemon_env(dp.root),
                               timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "agents-demo" in shown.stdout and "Oslo: 21C and sunny" in shown.stdout
        assert "Earlier tool output" not in shown.stdout  # popped

        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.close()


async def test_budgeted_get_items_keeps_tool_pairs_and_feeds_the_runner() -> None:
    with daemon_process() as dp, LLMServer() as llm:
        llm.respond = scripted
        raw = MemmanSession("long", socket=str(dp.socket))
        filler = []
        for i in range(40):
            filler.append({"role": "user" if i % 2 == 0 else "assistant",
                           "content": f"message {i} " + "lorem ipsum " * 30})
        await raw.add_items(filler)
        await raw.add_items([
            {"type": "function_call", "call_id": "c9", "name": "get_weather",
             "arguments": "{\"city\": \"Rome\"}"},
            {"type": "function_call_output", "call_id": "c9", "output": "Rome: 30C"}])
        budgeted = MemmanSession("long", max_tokens=600, socket=str(dp.socket))
        full = await raw.get_items()
        window = await budgeted.get_items()
        assert len(full) == 42 and len(window) < len(full)
        assert window[-2]["type"] == "function_call" and window[-1]["call_id"] == "c9"
        calls = {i["call_id"] for i in window if i.get("type") == "function_call"}
        assert {i["call_id"] for i in window if i.get("type") == "function_call_output"} <= calls
        with SyncClient(dp.socket) as mm:
            counted = mm.count_tokens([m for m in mm.session_context(
                "long", {"max_tokens": 600})["messages"]])["tokens"]
        assert counted <= 600 + 3  # + the 3 tokens that prime the reply

        agent = make_agent(llm.base_url)
        await Runner.run(agent, "What did the tool tell you before?", session=budgeted)
        sent = llm.chat_requests()[-1]["messages"]
        assert len(sent) < 42 and any(m["role"] == "tool" and m["content"] == "Rome: 30C"
                                      for m in sent)
        await raw.close()
        await budgeted.close()


@pytest.mark.parametrize("item, entry", [
    ({"role": "user", "content": "hi"}, {"type": "message", "role": "user", "content": "hi"}),
    ({"role": "developer", "content": "be brief"},
     {"type": "message", "role": "system", "content": "be brief"}),
    ({"type": "message", "role": "assistant", "id": "m1", "status": "completed",
      "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
     {"type": "message", "role": "assistant", "content": "hello"}),
    ({"type": "function_call_output", "call_id": "c1", "output": [
        {"type": "input_text", "text": "done"}]},
     {"type": "tool_result", "role": "tool", "content": "done", "tool_call_id": "c1"}),
    ({"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "think"}]},
     {"type": "context", "role": "system", "content": "[reasoning] think"}),
])
def test_items_map_to_typed_entries(item: dict, entry: dict) -> None:
    got = item_to_entry(item)
    assert {k: got[k] for k in entry} == entry and got["metadata"]["agents_item"] == item


async def test_another_user_is_refused_not_silently_made_owner() -> None:
    from memman.errors import CONFLICT, MemmanError

    with daemon_process() as dp:
        ana = MemmanSession("agents-owned", user_id="ana", socket=str(dp.socket))
        await ana.add_items([{"role": "user", "content": "my locker code is 2231"}])
        bob = MemmanSession("agents-owned", user_id="bob", socket=str(dp.socket))
        with pytest.raises(MemmanError) as err:
            await bob.get_items()
        assert err.value.code == CONFLICT and "belongs to user 'ana'" in err.value.message
        with pytest.raises(MemmanError):
            await bob.clear_session()
        assert len(await ana.get_items()) == 1
        await ana.close()
        await bob.close()
