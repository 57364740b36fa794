"""A fuzzer over every method's parameters, generated from the same declared schemas the
daemon checks with (``memman.params``, through ``rpc.REGISTRY``).

Three kinds of values, for every parameter of every method and every declared key inside
options maps, entries and imported files (nested up to four levels):

- **bad** values the schema must refuse (wrong types, NaN / inf, 2^64-1, bin, ext, unknown
  keys, ...): the answer is -32602 naming the path of the value;
- **edge** values the schema accepts (bounds, empty text, path-like ids, deep nesting):
  any answer but -32603;
- **random** msgpack values (seeded): any answer but -32603.

After every error answer, the database (every row of every table) and the in-memory state
(each session's export, snippets, cache entries) are what they were before the call.
Bounded by count (all generated cases) and by time (``BUDGET_S``; at least ``MIN_CASES`` run).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import msgpack

from memman import names
from memman.errors import INTERNAL_ERROR, INVALID_PARAMS, MemmanError
from memman.params import Array, Map, Nullable, Spec
from memman_daemon import api
from memman_daemon.clock import FakeClock
from memman_daemon.engine import portability
from memman_daemon.rpc import REGISTRY
from tests.helpers import running_daemon

BUDGET_S = 90.0
MIN_CASES = 1500
RANDOM_PER_PARAM = 4
CALL_TIMEOUT_S = 60.0  #: every call is answered (a request never answered is a failure)

FIXED = {"session_id": "s1", "user_id": "u1", "tenant_id": "t1", "doc_id": "d1"}


def _mutations(spec: Spec, sample: Any, depth: int = 0):
    """(path suffix, value) pairs: ``sample`` with one bad value placed at each declared spot."""
    for bad in spec.bad_samples():
        yield "", bad
    if depth >= 4:
        return
    if isinstance(spec, Nullable):  # its own bad samples are the inner's minus nil: done above
        for suffix, mv in _mutations(spec.inner, sample, depth):
            if suffix:
                yield suffix, mv
    elif isinstance(spec, Map) and isinstance(sample, dict):
        for k, fs in spec.fields.items():
            sub = sample.get(k, fs.sample())
            for suffix, mv in _mutations(fs, sub, depth + 1):
                yield f".{k}{suffix}", {**sample, k: mv}
    elif isinstance(spec, Array) and isinstance(sample, list):
        item = sample[0] if sample else spec.item.sample()
        for suffix, mv in _mutations(spec.item, item, depth + 1):
            yield f"[0]{suffix}", [mv, *sample[1:]]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    choices = [None, True, False, rng.randint(-(2**63), 2**64 - 1), rng.random() * 1e6,
               float("nan"), "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 8))),
               bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 6))),
               msgpack.ExtType(rng.randint(0, 127), b"x")]
    if depth < 3:
        choices += [[_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
                    {rng.choice(["limit", "id", "content", "x", "metadata"]):
                     _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}]
    return rng.choice(choices)


#: tables written by background telemetry (usage-series points, embedding vectors and the
#: recall index's token vectors of what an earlier call stored): not changes a refused call made
BACKGROUND = ("usage_series", "vectors", "recall_tokens")


class _State:
    """What the daemon holds: every operation committed (observed at ``Store.write``, whoever
    calls it) and the in-memory sessions, snippets and cache entries."""

    def __init__(self, d) -> None:
        self.d = d
        self.writes = 0
        store = d.app.store
        original = store.write

        async def observed(ops, **kw):
            ops = list(ops)
            if any(not any(t in sql for t in BACKGROUND) for sql, _ in ops):
                self.writes += 1
            return await original(ops, **kw)

        store.write = observed  # observation only: every write still goes to SQLite

    def snapshot(self) -> Any:
        app = self.d.app
        memory = {sid: portability.export(s) for sid, s in app.sessions.by_id.items()}
        pads = {sid: [sn.to_wire() for sn in pad.values()]
                for sid, pad in app.scratchpad.by_session.items()}
        cache = {sid: sorted(e.key for e in app.cache.entries(sid)) for sid in app.sessions.by_id}
        return self.writes, memory, pads, cache


async def _settle(d) -> None:
    """Let writes a successful call left to background tasks (usage series points, vectors)
    commit, so that the next snapshot holds them."""
    for _ in range(3):
        for _ in range(5):
            await asyncio.sleep(0)
        await d.app.store.flush()


async def _fixtures(c, d) -> dict[str, Any]:
    await c.call(names.SESSION_OPEN, "s1", {"user_id": "u1", "tenant_id": "t1"})
    if not d.app.sessions.get("s1").entries:
        await c.call(names.SESSION_ADD, "s1", {"content": "hello there"})
    if not d.app.scratchpad.peek("s1"):
        await c.call(names.SCRATCHPAD_WRITE, "s1", "users usually prefer short answers")
    await c.call(names.DOCS_ADD, "t1", {"doc_id": "d1", "content": "the deploy runs at noon"})
    await c.call(names.CACHE_PUT, "s1", "tool", {"q": 1}, "result")
    return {"snippet_id": d.app.scratchpad.peek("s1")[0].id,
            "entry_id": d.app.sessions.get("s1").entries[0].id,
            "data": portability.export(d.app.sessions.get("s1")),
            "entry": {"content": "x"}, "doc": {"content": "text"}, "params": {"q": 1},
            "key": d.app.cache.entries("s1")[0].key if d.app.cache.entries("s1") else "k"}


def _baseline(method, fixtures: dict[str, Any]) -> list[Any]:
    out = []
    for p in method.params:
        if p.name in FIXED:
            out.append(FIXED[p.name])
        elif p.name in fixtures:
            out.append(fixtures[p.name])
        elif not p.required:
            out.append(p.default() if callable(p.default) else p.default)
        else:
            out.append(p.spec.sample())
    return out


async def test_every_method_every_parameter() -> None:
    api.load_all()
    rng = random.Random(20261123)
    stats = {"bad": 0, "edge": 0, "random": 0, "refused_unchanged": 0}
    started = time.monotonic()
    internal: list[str] = []
    async with running_daemon(clock=FakeClock(), compression={"auto_compress": False},
                              docs={"watch": False}) as d, d.client() as c:
        state = _State(d)
        # the state check sees a commit and a change in memory (else it could not fail)
        await _fixtures(c, d)
        await _settle(d)
        s0 = state.snapshot()
        await c.call(names.SESSION_ADD, "s1", {"content": "self-check"})
        s1 = state.snapshot()
        assert s1[0] != s0[0] and s1[1] != s0[1]
        for name in sorted(REGISTRY.methods):
            if name in (names.SET_CLIENT_INFO,):
                continue  # renames the fuzzing connection; its schema is covered below anyway
            if time.monotonic() - started > BUDGET_S:
                break
            method = REGISTRY.methods[name]
            fixtures = await _fixtures(c, d)
            await _settle(d)
            base = _baseline(method, fixtures)
            for i, p in enumerate(method.params):
                cases: list[tuple[str, str, Any]] = []
                sample = base[i] if base[i] is not None else p.spec.sample()
                for suffix, v in _mutations(p.spec, sample):
                    # nil for an optional options map means "no options", as leaving it out
                    nil_ok = v is None and not suffix and not p.required and isinstance(p.spec, Map)
                    cases.append(("edge" if nil_ok else "bad", f"{p.name}{suffix}", v))
                cases += [("edge", p.name, v) for v in p.spec.edge_samples()]
                cases += [("random", p.name, _random_value(rng)) for _ in range(RANDOM_PER_PARAM)]
                before = None  # the state now; taken again only after a call that succeeded
                for kind, path, value in cases:
                    params = list(base)
                    params[i] = value
                    if before is None:  # after a success: let its background writes land
                        await _settle(d)
                        before = state.snapshot()
                    try:
                        await asyncio.wait_for(c.call(name, *params), CALL_TIMEOUT_S)
                        err = None
                    except MemmanError as exc:
                        err = exc
                    except TimeoutError:
                        raise AssertionError(f"{name} {path}={value!r:.200}: no answer within "
                                             f"{CALL_TIMEOUT_S}s") from None
                    stats[kind] += 1
                    if err is None:
                        assert kind != "bad", f"{name} accepted a bad {path}: {value!r:.200}"
                        before = None
                        continue
                    if err.code == INTERNAL_ERROR:
                        internal.append(f"{name} {path}={value!r:.120}: {err.message}")
                        before = None
                        continue
                    if kind == "bad":
                        assert err.code == INVALID_PARAMS, (name, path, value, err)
                        quoted = err.message.split("'")[1] if "'" in err.message else ""
                        assert quoted.startswith(path) or path.startswith(quoted) and quoted, \
                            f"{name}: {path} refused as {err.message!r}"
                    assert state.snapshot() == before, f"{name} changed state on refusal: {err}"
                    stats["refused_unchanged"] += 1
                if time.monotonic() - started > BUDGET_S:
                    break
        assert await c.call(names.PING) == "pong"
    assert not internal, "internal errors:\n" + "\n".join(internal[:30])
    total = stats["bad"] + stats["edge"] + stats["random"]
    assert total >= MIN_CASES, stats
    print(f"fuzzed {total} calls: {stats}")
