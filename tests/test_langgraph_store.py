"""MemmanStore as LangGraph uses it: a compiled StateGraph whose nodes put and search through
the store, against a real daemon; and the BaseStore operations one by one (sync and async)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from memman.errors import INVALID_PARAMS, MemmanError
from memman.integrations.langgraph import MemmanStore, memory_key, parse_key
from memman.sync_client import SyncClient
from tests.helpers import DaemonProcess, daemon_process


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    with daemon_process() as dp:
        yield dp


class State(TypedDict, total=False):
    user: str
    said: str
    found: list[str]


def remember(state: State, *, store: BaseStore) -> State:
    store.put(("memories", state["user"]), f"m{len(state['said'])}", {"text": state["said"]})
    return {}


def recall(state: State, *, store: BaseStore) -> State:
    hits = store.search(("memories", state["user"]), query="which pet and its name", limit=3)
    return {"found": [h.value["text"] for h in hits]}


def test_a_compiled_graph_uses_it(daemon: DaemonProcess) -> None:
    store = MemmanStore(user_id="ana", socket=str(daemon.socket))
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    graph = builder.compile(store=store)
    graph.invoke({"user": "ana", "said": "Ana's pet is a cat called Mirabelle."})
    graph.invoke({"user": "ana", "said": "Ana prefers meetings after ten."})
    out = graph.invoke({"user": "ana", "said": "Ana's pet name was chosen by her niece."})
    assert any("Mirabelle" in t for t in out["found"]), out
    # it is memman user memory: durable, and found by memman's own search
    with SyncClient(daemon.socket) as mm:
        keys = [r["key"] for r in mm.memory_list("ana", "semantic", {})["records"]]
        assert memory_key(("memories", "ana"), "m36") in keys and len(keys) == 3
        res = mm.memory_search("ana", "semantic", "Mirabelle")["results"]
        assert res and "Mirabelle" in res[0]["content"]
    store.close()


async def test_the_base_store_operations(daemon: DaemonProcess) -> None:
    store = MemmanStore(user_id="bo", socket=str(daemon.socket))
    ns = ("users", "bo", "prefs")
    store.put(ns, "editor", {"name": "vim", "kind": "tool", "rank": 1})
    store.put(ns, "shell", {"name": "fish", "kind": "tool", "rank": 2})
    store.put(("users", "bo", "notes"), "n/1:x", {"text": "the deploy key rotates", "kind": "note"})
    item = store.get(ns, "editor")
    assert item is not None and item.value == {"name": "vim", "kind": "tool", "rank": 1}
    assert item.namespace == ns and item.key == "editor"
    store.put(ns, "editor", {"name": "helix", "kind": "tool", "rank": 1})
    assert store.get(ns, "editor").value["name"] == "helix"
    assert store.get(ns, "nothing") is None
    # search by prefix, with a filter, with a query
    assert {i.key for i in store.search(("users", "bo"))} == {"editor", "shell", "n/1:x"}
    assert {i.key for i in store.search(("users",), filter={"kind": "tool"})} == {"editor",
                                                                                  "shell"}
    assert [i.key for i in store.search(ns, filter={"rank": {"$gt": 1}})] == ["shell"]
    hits = store.search(("users", "bo"), query="deploy key")
    assert hits and hits[0].key == "n/1:x" and hits[0].score is not None
    assert store.search(("users", "bo"), limit=1, offset=1) != []
    # namespaces
    assert store.list_namespaces() == [("users", "bo", "notes"), ("users", "bo", "prefs")]
    assert store.list_namespaces(suffix=("prefs",)) == [("users", "bo", "prefs")]
    assert store.list_namespaces(prefix=("users", "*"), max_depth=2) == [("users", "bo")]
    # delete, and put None
    store.delete(ns, "shell")
    assert store.get(ns, "shell") is None
    store.put(ns, "editor", None)
    assert store.search(ns) == []
    # the async variants
    await store.aput(ns, "lang", {"name": "python"})
    assert (await store.aget(ns, "lang")).value == {"name": "python"}
    assert [i.key for i in await store.asearch(ns)] == ["lang"]
    assert ("users", "bo", "prefs") in await store.alist_namespaces()
    await store.adelete(ns, "lang")
    assert await store.aget(ns, "lang") is None
    store.close()


def test_keys_round_trip() -> None:
    for ns, key in ((("a",), "k"), (("a/b", "c:d"), "e:f/g"), (("ü", "x y"), "%41")):
        assert parse_key(memory_key(ns, key)) == (ns, key)
    assert parse_key("editor") is None


def test_a_namespace_is_searched_within_itself(daemon: DaemonProcess) -> None:
    """The namespace prefix is a scope applied before ranking: sixty better-matching items of
    another namespace (more than the fifty a search asks for) do not crowd out the one item of
    this namespace; a namespace whose name only starts like it ("pets" / "petsitter") stays
    out."""
    store = MemmanStore(user_id="cy", socket=str(daemon.socket))
    for k in range(60):
        store.put(("cy", "petsitter"), f"p{k}", {"text": f"the cat food brand number {k}: "
                                                 "cat food cat food"})
    store.put(("cy", "pets"), "miso", {"text": "Miso the cat eats salmon cat food"})
    hits = store.search(("cy", "pets"), query="cat food", limit=3)
    assert [h.key for h in hits] == ["miso"] and hits[0].namespace == ("cy", "pets")
    assert len(store.search(("cy",), query="cat food", limit=100)) == 61
    store.close()


def test_the_key_prefixes_option_is_checked(daemon: DaemonProcess) -> None:
    with SyncClient(daemon.socket) as c:
        with pytest.raises(MemmanError) as got:
            c.call("memman_memory_search", "cy", "semantic", "cat", {"key_prefixes": "x"})
        assert got.value.code == INVALID_PARAMS and "opts.key_prefixes" in got.value.message


def test_another_users_store_under_the_same_namespace_sees_nothing(daemon: DaemonProcess) -> None:
    """The namespace narrows the caller's own memory, never widens it: bob's store searching,
    listing and getting ana's exact namespace and key finds nothing of hers, and his writes
    there do not touch her item."""
    ana = MemmanStore(user_id="ana-lg", socket=str(daemon.socket))
    bob = MemmanStore(user_id="bob-lg", socket=str(daemon.socket))
    ns = ("shared", "notes")
    ana.put(ns, "door", {"text": "the door code is 4417"})
    assert [h.key for h in ana.search(ns, query="door code")] == ["door"]
    assert bob.search(ns, query="door code", limit=50) == []
    assert bob.search(("shared",), query="door code 4417", limit=50) == []
    assert bob.get(ns, "door") is None
    assert bob.list_namespaces(prefix=("shared",)) == []
    with SyncClient(daemon.socket) as c:  # the raw option: her prefix finds it for her only
        opts = {"key_prefixes": [memory_key(ns, "")[:-1]]}
        mine = c.call("memman_memory_search", "ana-lg", "semantic", "door code", opts)
        assert len(mine["results"]) == 1
        assert c.call("memman_memory_search", "bob-lg", "semantic", "door code",
                      opts)["results"] == []
    bob.put(ns, "door", {"text": "bob's door"})
    bob.delete(ns, "door")
    assert ana.get(ns, "door").value == {"text": "the door code is 4417"}
    ana.close()
    bob.close()
