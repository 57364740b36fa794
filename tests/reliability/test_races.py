"""Races decided in one place (problem 4): evict / promote / write of the same snippet, and
finalize of the same cycle, from different connections at once. One wins; the loser gets a
clear error; what the daemon answers is what a restart finds."""

from __future__ import annotations

import asyncio

from memman import names
from memman.errors import CONFLICT, NOT_FOUND, MemmanError
from tests.helpers import running_daemon, short_tmpdir

ROUNDS = 25


async def test_evict_racing_promote_never_brings_a_snippet_back() -> None:
    root = short_tmpdir()
    evicted: list[int] = []
    async with running_daemon(root, docs={"watch": False}) as d, \
            d.client("a") as a, d.client("b") as b, d.client("c") as c:
        await a.call(names.SESSION_OPEN, "s", {"user_id": "u", "tenant_id": "t"})
        for i in range(ROUNDS):
            w = await a.call(names.SCRATCHPAD_WRITE, "s", f"users usually prefer plan {i}")
            sid = w["snippet"]["id"]
            target = ("business", "preference", "rule")[i % 3]
            opts = {"business": {}, "preference": {"key": f"plan{i}"},
                    "rule": {"condition": f"when {i}"}}[target]
            results = await asyncio.gather(
                b.call(names.SCRATCHPAD_PROMOTE, "s", sid, target, opts),
                a.call(names.SCRATCHPAD_EVICT, "s", sid),
                c.call(names.SCRATCHPAD_WRITE, "s", f"users usually prefer plan {i}"),
                return_exceptions=True)
            promote, evict, _ = results
            assert not isinstance(evict, Exception), evict  # evict was sent before... or after
            if isinstance(promote, MemmanError):
                assert promote.code == NOT_FOUND and str(sid) in promote.message
            else:
                assert not isinstance(promote, Exception), promote
            evicted.append(sid)
            assert sid not in {sn.id for sn in d.app.scratchpad.peek("s")}
    async with running_daemon(root, docs={"watch": False}) as d:
        back = {sn.id for sn in d.app.scratchpad.peek("s")} & set(evicted)
        assert not back, f"{len(back)} evicted snippets came back after a restart"


async def test_two_finalizes_of_one_cycle_record_one_exchange() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client("a") as a, d.client("b") as b:
        await a.call(names.SESSION_OPEN, "s")
        for i in range(ROUNDS):
            await a.call(names.SESSION_ADD, "s", {"content": f"question {i}"})
            results = await asyncio.gather(
                a.call(names.SESSION_FINALIZE, "s", f"question {i}", f"answer {i}"),
                b.call(names.SESSION_FINALIZE, "s", f"question {i}", f"answer {i}"),
                return_exceptions=True)
            ok = [r for r in results if not isinstance(r, Exception)]
            lost = [r for r in results if isinstance(r, Exception)]
            assert len(ok) == 1, results
            assert len(lost) == 1 and isinstance(lost[0], MemmanError)
            assert lost[0].code == CONFLICT and "finalized" in lost[0].message
        cycles = (await a.call(names.SESSION_GET, "s"))["counters"]["cycles"]
        assert cycles == ROUNDS
    async with running_daemon(root) as d, d.client() as c:
        s = await c.call(names.SESSION_GET, "s")
        assert s["counters"]["cycles"] == ROUNDS
        assert len(s["exchanges"]) == min(ROUNDS, d.app.config.cycle.max_exchanges)


async def test_import_replace_clear_and_delete_racing_adds_leave_memory_equal_to_disk() -> None:
    """Adds to one session race an import with replace (then a clear, then a delete) from
    other connections: what the daemon holds in memory afterwards is what a restart finds —
    memory follows the commit order, whichever way each race goes."""
    root = short_tmpdir()
    template = {"format": "memman.session/1", "session_id": "s", "entries": [
        {"id": i + 1, "type": "message", "role": "user", "content": f"imported {i}",
         "tokens": 3, "created_at": 1_700_000_000 + i} for i in range(30)]}
    held: dict[str, list[str]] = {}
    async with running_daemon(root, storage={"batch_max_rows": 7}) as d:
        async with d.client("a") as a, d.client("b") as b, d.client("c") as c, \
                d.client("e") as e:
            writers = [a, b, c]
            for r in range(5):  # rounds: bounded by count
                sid = f"s{r}"
                await a.call(names.SESSION_OPEN, sid, {})

                async def adds(w, n: int, sid: str = sid) -> None:
                    for i in range(n):
                        try:
                            await w.call(names.SESSION_ADD, sid,
                                         {"role": "user", "content": f"add {i}"})
                        except MemmanError as exc:
                            assert exc.code == NOT_FOUND, exc  # only once it is deleted

                async def change(sid: str = sid, r: int = r) -> None:
                    await e.call(names.SESSION_IMPORT, {**template, "session_id": sid},
                                 {"replace": True})
                    if r % 2:
                        await e.call(names.SESSION_CLEAR, sid)
                    if r == 4:
                        await e.call(names.SESSION_DELETE, sid)

                await asyncio.gather(change(), *(adds(w, 40) for w in writers))
            for r in range(5):
                try:
                    got = await a.call(names.SESSION_GET, f"s{r}", {"limit": 10_000})
                except MemmanError:
                    continue
                held[f"s{r}"] = [x["content"] for x in got["entries"]]
    async with running_daemon(root) as d, d.client() as a:
        disk: dict[str, list[str]] = {}
        for r in range(5):
            try:
                got = await a.call(names.SESSION_GET, f"s{r}", {"limit": 10_000})
            except MemmanError:
                continue
            disk[f"s{r}"] = [x["content"] for x in got["entries"]]
    assert disk == held
