"""``MemmanStore``: a LangGraph ``BaseStore`` backed by memman's user memory.

The long-term memory of LangGraph agents (and of LangMem, which writes through the same
interface) lives in memman, beside everything else the user's agents remember::

    from langgraph.graph import StateGraph
    from memman.integrations.langgraph import MemmanStore

    store = MemmanStore(user_id="ana")
    graph = builder.compile(store=store)        # nodes get it as their `store` argument

Each item is a user-memory preference of ``user_id`` (semantic memory, ``memman_memory_learn``)
whose key names the item's namespace and key (``langgraph:users/ana/memories:k1``, each part
percent-encoded) and whose value is the item's value; its namespace and key also ride in the
record's metadata. So items are durable, audited, shown in the TUI's memory screen and found by
``memman search`` and the MCP ``search`` tool. ``search`` with a ``query`` is memman's hybrid
search (BM25 + the local embedder) over those records, restricted to the namespace prefix
before ranking (``opts.key_prefixes``);
``filter`` compares value fields (``{"kind": "fact"}``, or operators ``$eq``, ``$ne``, ``$gt``,
``$gte``, ``$lt``, ``$lte`` as LangGraph's in-memory store does). ``put(..., None)`` and
``delete`` forget the record (audited). ``list_namespaces`` reads the keys. TTLs are not
supported (``supports_ttl = False``).

Needs LangGraph: ``pip install 'memman-agent[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from memman import names
from memman.errors import NOT_FOUND, ConnectionLost, MemmanError

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("memman.integrations.langgraph needs LangGraph: "
                      "pip install 'memman-agent[langgraph]'") from exc

PREFIX = "langgraph:"  #: the user-memory keys this store owns start with it
PAGE = 500  #: records read per memman_memory_list call


def memory_key(namespace: tuple[str, ...], key: str) -> str:
    """``langgraph:users/ana:k1``: the user-memory key of one item (each part percent-encoded,
    so ``/`` and ``:`` inside a label or key cannot be confused with the separators)."""
    return (PREFIX + "/".join(quote(p, safe="") for p in namespace) + ":"
            + quote(key, safe=""))


def key_prefixes(namespace_prefix: tuple[str, ...]) -> list[str]:
    """What the user-memory keys of the items under ``namespace_prefix`` start with: the
    namespace itself (``...pets:``) or one below it (``...pets/``), never a namespace that
    only starts like it (``...petsitter``)."""
    if not namespace_prefix:
        return [PREFIX]
    ns = PREFIX + "/".join(quote(p, safe="") for p in namespace_prefix)
    return [ns + ":", ns + "/"]


def parse_key(mkey: str) -> tuple[tuple[str, ...], str] | None:
    """The (namespace, key) a user-memory key stands for, or None for another key."""
    if not mkey.startswith(PREFIX):
        return None
    ns, sep, key = mkey[len(PREFIX):].rpartition(":")
    if not sep:
        return None
    return tuple(unquote(p) for p in ns.split("/")) if ns else (), unquote(key)


def _time(ts: Any) -> datetime:
    return datetime.fromtimestamp(float(ts or 0), tz=UTC)


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {"text": v}
    return v if isinstance(v, dict) else {"value": v}


def _text(value: dict[str, Any]) -> str:
    """What the stored record reads as (what search matches): the value as JSON."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _starts(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


def _matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path):]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


_OPS = {"$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b,
        "$gt": lambda a, b: a > b, "$gte": lambda a, b: a >= b,
        "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}


def _passes(value: dict[str, Any], filt: dict[str, Any] | None) -> bool:
    for field, want in (filt or {}).items():
        have = value.get(field)
        if isinstance(want, dict) and want and all(k in _OPS for k in want):
            try:
                if not all(_OPS[op](have, arg) for op, arg in want.items()):
                    return False
            except TypeError:
                return False
        elif have != want:
            return False
    return True


class MemmanStore(BaseStore):
    """A LangGraph store over memman user memory (see the module docstring)."""

    supports_ttl = False

    def __init__(self, *, user_id: str = "default", socket: str | None = None,
                 client: Any = None) -> None:
        self.user_id = user_id
        self._socket = socket
        self._client = client
        self._own = client is None
        self._lock = threading.Lock()

    # --- the connection ------------------------------------------------------------------
    def _call(self, method: str, *params: Any) -> Any:
        from memman.sync_client import SyncClient

        with self._lock:
            if self._client is None:
                self._client = SyncClient(self._socket, name="memman-langgraph")
            try:
                return self._client.call(method, *params)
            except ConnectionLost:
                if self._own:  # the next call connects again
                    self._client.close()
                    self._client = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._own and self._client is not None:
                self._client.close()
                self._client = None

    # --- records -------------------------------------------------------------------------
    def _records(self) -> Iterable[dict[str, Any]]:
        """Every record of this store (the user's preferences under ``langgraph:``)."""
        before: int | None = None
        while True:
            opts: dict[str, Any] = {"limit": PAGE}
            if before is not None:
                opts["before_id"] = before
            recs = self._call(names.MEMORY_LIST, self.user_id, "semantic", opts)["records"]
            for r in recs:
                if str(r.get("key") or "").startswith(PREFIX):
                    yield r
            if len(recs) < PAGE:
                return
            before = recs[-1]["id"]

    def _item(self, rec: dict[str, Any], cls: type = Item, score: float | None = None) -> Any:
        parsed = parse_key(str(rec.get("key") or ""))
        assert parsed is not None
        ns, key = parsed
        value = _value(rec["value"] if "value" in rec else rec.get("content"))
        kwargs: dict[str, Any] = {"value": value, "key": key, "namespace": ns,
                                  "created_at": _time(rec.get("created_at")),
                                  "updated_at": _time(rec.get("updated_at",
                                                              rec.get("timestamp")))}
        if cls is SearchItem:
            kwargs["score"] = score
        return cls(**kwargs)

    # --- the operations ------------------------------------------------------------------
    def _get(self, op: GetOp) -> Item | None:
        got = self._call(names.MEMORY_RECALL, self.user_id, memory_key(op.namespace, op.key))
        if got is None:
            return None
        return Item(value=_value(got["value"]), key=op.key, namespace=tuple(op.namespace),
                    created_at=_time(got.get("created_at")),
                    updated_at=_time(got.get("timestamp")))

    def _put(self, op: PutOp) -> None:
        mkey = memory_key(op.namespace, op.key)
        if op.value is None:
            got = self._call(names.MEMORY_RECALL, self.user_id, mkey)
            if got is not None:
                try:
                    self._call(names.MEMORY_FORGET, self.user_id, f"memory:{got['id']}")
                except MemmanError as exc:  # forgotten meanwhile: deleted either way
                    if exc.code != NOT_FOUND:
                        raise
            return
        value = dict(op.value)
        self._call(names.MEMORY_LEARN, self.user_id, mkey, _text(value), {
            "metadata": {"langgraph": {"namespace": list(op.namespace), "key": op.key}}})

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        hits: list[SearchItem] = []
        if op.query:
            want = op.offset + op.limit
            # the namespace prefix as key prefixes, applied by the daemon before it ranks
            # (a namespace full of better matches elsewhere cannot crowd this one out)
            res = self._call(names.MEMORY_SEARCH, self.user_id, "semantic", op.query,
                             {"limit": max(50, want * 5), "key_prefixes": key_prefixes(prefix)})
            for r in res["results"]:
                parsed = parse_key(str(r.get("key") or ""))
                if parsed is None or not _starts(parsed[0], prefix):
                    continue
                item = self._item(r, SearchItem, float(r.get("score") or 0.0))
                if _passes(item.value, op.filter):
                    hits.append(item)
        else:
            for r in self._records():
                parsed = parse_key(str(r["key"]))
                if parsed is None or not _starts(parsed[0], prefix):
                    continue
                item = self._item(r, SearchItem, None)
                if _passes(item.value, op.filter):
                    hits.append(item)
            hits.sort(key=lambda i: i.updated_at, reverse=True)
        return hits[op.offset: op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        seen: set[tuple[str, ...]] = set()
        for r in self._records():
            parsed = parse_key(str(r["key"]))
            if parsed is None:
                continue
            ns = parsed[0]
            if op.match_conditions and not all(_matches(c, ns) for c in op.match_conditions):
                continue
            seen.add(ns[: op.max_depth] if op.max_depth is not None else ns)
        return sorted(seen)[op.offset: op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        out: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                out.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                out.append(None)
            elif isinstance(op, SearchOp):
                out.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                out.append(self._list_namespaces(op))
            else:
                raise ValueError(f"unknown store operation {type(op).__name__}")
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The same in a worker thread (the blocking client answers after each COMMIT)."""
        return await asyncio.to_thread(self.batch, list(ops))
