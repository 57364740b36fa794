"""The model's own encoding, offline: gpt-4o-mini counts exactly as o200k_base counts.

The reference encoding here is built independently of memman: the test reads bpe-openai's
shipped ``o200k_base.tiktoken.gz`` itself, checks it against tiktoken's published sha256, parses
the ranks itself, and takes only the regex and special tokens from tiktoken's own definition.
tiktoken's downloader is made to fail, so nothing can come from the network.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

from memman_daemon import tokens as tokens_mod
from memman_daemon.tokens import OFFLINE_ENCODING, TokenCounter
from tests.helpers import running_daemon, short_tmpdir

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

MESSAGES = {
    "ja": [
        {"role": "system", "content": "あなたは丁寧で正確なアシスタントです。回答は日本語で簡潔に。"},
        {"role": "user", "content": "来週の東京出張の予定を確認してください。会議は火曜日の午前十時から、"
                                    "場所は品川の本社ビル十二階です。新幹線の予約も必要です。"},
        {"role": "assistant", "content": "承知しました。火曜日10時、品川本社12階の会議ですね。"
                                         "新幹線は月曜夕方の「のぞみ」を予約しましょうか？"},
    ],
    "de": [
        {"role": "system", "content": "Du bist ein sorgfältiger Assistent. Antworte auf Deutsch."},
        {"role": "user", "content": "Bitte prüfe die Rechnungsübersicht für die Kundenbetreuung: "
                                    "Die Geschäftsführung möchte die Überweisungsbestätigungen "
                                    "bis Donnerstagnachmittag haben."},
        {"role": "assistant", "content": "Gerne. Ich prüfe die Überweisungsbestätigungen und "
                                         "schicke die Zusammenfassung bis Donnerstag um 14 Uhr."},
    ],
    "en": [
        {"role": "system", "content": "You are a careful assistant. Answer in English."},
        {"role": "user", "content": "Please check the deployment log for build 4812 and tell me "
                                    "why the migration step failed on the staging cluster."},
        {"role": "assistant", "name": "ops_bot",
         "content": "The migration failed because the column `orders.total_cents` already "
                    "existed; rerun with --skip-existing."},
    ],
}


def _shipped_o200k() -> bytes:
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None and spec.submodule_search_locations, "bpe-openai is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "o200k_base.tiktoken.gz"
    data = gzip.decompress(path.read_bytes())
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256
    return data


@pytest.fixture(scope="module")
def reference_o200k() -> tiktoken.Encoding:
    """o200k_base built by the test from bpe-openai's file (ranks parsed here, not by tiktoken)."""
    ranks = {}
    for line in _shipped_o200k().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    mp = pytest.MonkeyPatch()
    mp.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: ranks)
    try:
        spec = openai_public.o200k_base()  # only its regex and special tokens are used
    finally:
        mp.undo()
    return tiktoken.Encoding(name="o200k_reference", pat_str=spec["pat_str"],
                             mergeable_ranks=ranks, special_tokens=spec["special_tokens"])


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"tiktoken tried to download {blobpath}")
        return Path(blobpath).read_bytes()

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)


def _reference_count(enc: tiktoken.Encoding, messages: list[dict[str, Any]]) -> int:
    n = 3  # reply priming
    for m in messages:
        n += 3 + sum(len(enc.encode(v)) for v in m.values()) + (1 if "name" in m else 0)
    return n


@pytest.mark.parametrize("lang", ["ja", "de", "en"])
async def test_gpt_4o_mini_counts_as_o200k_base(lang: str, reference_o200k: tiktoken.Encoding) -> None:
    msgs = MESSAGES[lang]
    expected = _reference_count(reference_o200k, msgs)
    async with running_daemon() as d, d.client() as c:
        answer = await c.count_tokens(msgs, "gpt-4o-mini")
        assert answer["encoding"] == "o200k_base"
        assert answer["tokens"] == expected
        await c.session_open(f"s-{lang}", {"model": "gpt-4o-mini"})
        stored = [(await c.session_add(f"s-{lang}", m))["tokens"] for m in msgs]
        assert sum(stored) + 3 == expected
        tok = (await c.stats())["tokenizer"]
        assert tok["encoding"] == "o200k_base" and tok["fallbacks"] == {}
        assert tok["sources"]["o200k_base"] == "bpe-openai"
        # read in place: nothing was copied into the data dir
        assert not (d.app.config.data_dir / "cache").exists()
    # cl100k would have over-counted Japanese and German: the encodings really differ here
    cl100k = TokenCounter().count_messages(msgs, "gpt-4")
    if lang != "en":
        assert cl100k > expected


def test_model_families_map_as_tiktoken_maps_them() -> None:
    tc = TokenCounter()
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o1", "o3-mini", "o4-mini"):
        assert tc.encoding_name(model) == "o200k_base", model
    for model in ("gpt-4", "gpt-4-0613", "gpt-3.5-turbo"):
        assert tc.encoding_name(model) == "cl100k_base", model
    assert tc.fallbacks == {}


def test_the_shipped_file_is_hash_checked_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy whose bytes differ is not used (the next good one is); nothing is written."""
    good = tokens_mod.shipped_files("o200k_base")
    assert good and good[0][0] == "bpe-openai"
    d = short_tmpdir()
    bad = d / "o200k_base.tiktoken"
    bad.write_bytes(tokens_mod._read(good[0][1])[:-10] + b"tampered\n")
    monkeypatch.setattr(tokens_mod, "shipped_files", lambda encoding: [("evil", bad), *good])
    enc, source = tokens_mod.load_shipped("o200k_base")
    assert source == "bpe-openai"
    assert enc.name == "o200k_base" and enc.encode("hello world") == [24912, 2375]
    monkeypatch.setattr(tokens_mod, "shipped_files", lambda encoding: [("evil", bad)])
    assert tokens_mod.load_shipped("o200k_base") is None
    assert sorted(p.name for p in d.iterdir()) == ["o200k_base.tiktoken"]


def test_last_resort_is_reported_when_no_package_ships_the_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens_mod, "shipped_files", lambda encoding: [])
    monkeypatch.setattr(tokens_mod, "_LOADED_FROM", {})
    monkeypatch.setattr(tokens_mod, "_LOADED", {})
    tc = TokenCounter()
    assert tc.encoding_name("gpt-4o-mini") == OFFLINE_ENCODING
    status = tc.status()
    assert status["fallbacks"]["gpt-4o-mini"] == {"wanted": "o200k_base", "used": OFFLINE_ENCODING}
    assert "bpe-openai" in status["failed"]["o200k_base"]


TOOLS = [
    {"type": "function", "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "unit": {"type": "string", "description": "The unit of temperature.",
                     "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search_orders",
        "description": "Find a customer's orders by status",
        "parameters": {"type": "object", "properties": {
            "customer_id": {"type": "integer", "description": "The customer's numeric id."},
            "status": {"type": "string", "description": "Order status",
                       "enum": ["open", "shipped", "cancelled", "returned"]},
            "limit": {"type": "integer", "description": "At most this many orders"}}}}},
    {"type": "function", "function": {
        "name": "ping_service", "description": "Check that the service answers.",
        "parameters": {"type": "object", "properties": {}}}},
]


def _cookbook_tool_tokens(enc: tiktoken.Encoding, functions: list[dict[str, Any]]) -> int:
    """OpenAI cookbook, "How to count tokens with tiktoken", num_tokens_for_tools, gpt-4o-mini."""
    func_init, prop_init, prop_key, enum_init, enum_item, func_end = 7, 3, 3, -3, 3, 12
    total = 0
    for f in functions:
        fn = f["function"]
        total += func_init
        desc = fn["description"].removesuffix(".")
        total += len(enc.encode(fn["name"] + ":" + desc))
        props = fn["parameters"]["properties"]
        if len(props) > 0:
            total += prop_init
            for key, p in props.items():
                total += prop_key
                if "enum" in p:
                    total += enum_init
                    for item in p["enum"]:
                        total += enum_item + len(enc.encode(item))
                total += len(enc.encode(f"{key}:{p['type']}:{p['description'].removesuffix('.')}"))
    return total + func_end


async def test_three_tool_definitions_count_as_the_api_bills_them(
        reference_o200k: tiktoken.Encoding) -> None:
    msgs = MESSAGES["en"]
    tool_tokens = _cookbook_tool_tokens(reference_o200k, TOOLS)
    assert 40 < tool_tokens < 200  # a real count, not a constant
    assert TokenCounter().count_tools(TOOLS, "gpt-4o-mini") == tool_tokens
    async with running_daemon() as d, d.client() as c:
        answer = await c.count_tokens(msgs, "gpt-4o-mini", TOOLS)
        assert answer["tool_tokens"] == tool_tokens
        assert answer["tokens"] == _reference_count(reference_o200k, msgs) + tool_tokens
        as_opts = await c.count_tokens(msgs, "gpt-4o-mini", {"tools": TOOLS})
        assert as_opts == answer
        assert await c.count_tokens(msgs, {"model": "gpt-4o-mini", "tools": TOOLS}) == answer
        none = await c.count_tokens(msgs, "gpt-4o-mini")
        assert none["tool_tokens"] == 0 and none["tokens"] == answer["tokens"] - tool_tokens
        # gpt-4 (cl100k_base) starts each function at 10, not 7
        gpt4 = await c.count_tokens([], "gpt-4", TOOLS[2:])
        enc = TokenCounter().encoding("gpt-4")  # cl100k_base, read from bpe-openai in place
        assert gpt4["tool_tokens"] == 10 + len(enc.encode("ping_service:Check that the service answers")) + 12
        # a bad definition is -32602 naming its path, and the daemon keeps serving
        from memman.errors import MemmanError
        with pytest.raises(MemmanError) as err:
            await c.count_tokens(msgs, "gpt-4o-mini", [TOOLS[0], {"type": "function", "function": {}}])
        assert err.value.code == -32602 and "tools[1].function.name" in err.value.message
        assert await c.ping() == "pong"


async def test_context_and_preview_count_tool_definitions_in_the_budget(
        reference_o200k: tiktoken.Encoding) -> None:
    tool_tokens = _cookbook_tool_tokens(reference_o200k, TOOLS)
    async with running_daemon() as d, d.client() as c:
        await c.session_open("t", {"model": "gpt-4o-mini"})
        for m in MESSAGES["en"]:
            await c.session_add("t", m)
        plain = await c.session_context("t", {"max_tokens": 4000})
        with_tools = await c.session_context("t", {"max_tokens": 4000, "tools": TOOLS})
        assert with_tools["tool_tokens"] == tool_tokens
        assert with_tools["tokens"] == plain["tokens"] + tool_tokens
        preview = await c.session_preview("t", {"max_tokens": 4000, "tools": TOOLS})
        assert preview["tool_tokens"] == tool_tokens
