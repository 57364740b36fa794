"""Recall across hosts, the store's identity and the order of changes: two daemons, each with
its own socket and SQLite file, on one real PostgreSQL, driven over their sockets.

- A data dir moved to another path (and its host renamed) is the same origin: the other host
  neither recalls its entries twice nor keeps one it removed afterwards.
- A copy of a data dir started beside its original is detected and said; it publishes
  nothing (no duplicate, no foreign bytes) until the original stops.
- Rows an older daemon published under ``host:path`` are adopted, not written again.
- A clear followed at once by an add, a session reassigned to another user and an import with
  ``replace`` reach the other host in the order they were acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memman_daemon.clock import FakeClock
from tests.helpers import RunningDaemon, running_daemon, short_tmpdir
from tests.shared_store.test_recall_across_hosts import dsn, until

__all__ = ["dsn"]  # the fixture, shared with the first hosts' tests

MARCH = 1709373600.0  # 2024-03-02 10:00 UTC
FACT = "My cat Miso is allergic to chicken, please remember that."
NEW = "My parrot Kiwi now only eats sunflower seeds, please remember that."
ASK = "What must my cat avoid, what does my parrot eat, and where does my sister live?"




@contextlib.asynccontextmanager
async def daemon(dsn: str, root: Path | None = None) -> AsyncIterator[RunningDaemon]:
    async with running_daemon(root, clock=FakeClock(), storage={"shared": dsn}) as d:
        yield d


def body(ctx: dict[str, Any]) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


async def recalls(c: Any, sid: str, text: str) -> bool:
    return text in body(await c.session_context(sid, {"max_tokens": 1000}))


async def ask(c: Any, sid: str, user: str) -> None:
    await c.session_open(sid, {"user_id": user})
    await c.session_add(sid, {"role": "user", "content": ASK})


async def shared(dsn: str, sql: str, *args: Any) -> list[Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def live_rows(dsn: str, text: str) -> list[Any]:
    """The shared rows that still carry ``text``."""
    return await shared(dsn, "SELECT id, origin, user_id FROM recall_rows "
                             "WHERE NOT gone AND content=$1", text)


async def found(c: Any, user: str, text: str) -> int:
    """How many times a search of ``user``'s sessions finds ``text``."""
    got = (await c.memory_search(user, "session", "cat allergic chicken", {}))["results"]
    return sum(1 for r in got if r["text"] == text)


async def caught_up(d: RunningDaemon) -> bool:
    s = (await _stats(d))["recall"]["shared"]
    return s["publishing"] and s["reconciled"] >= 1 and s["queued"] == 0


async def _stats(d: RunningDaemon) -> dict[str, Any]:
    async with d.client() as c:
        return dict(await c.stats())


async def test_a_moved_data_dir_on_a_renamed_host_is_the_same_origin(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = short_tmpdir(), short_tmpdir()
    try:
        async with daemon(dsn) as b, b.client() as cb:
            await ask(cb, "q", "ana")
            async with daemon(dsn, first) as a, a.client() as ca:
                await ca.session_open("s1", {"user_id": "ana"})
                await ca.session_add("s1", {"role": "user", "content": FACT,
                                            "created_at": MARCH})
                await until(lambda: recalls(cb, "q", "Miso is allergic"))
                origin = (await ca.stats())["recall"]["shared"]["origin"]
            assert ":" not in origin and "/" not in origin  # not host:path
            # the data dir moves to another path, on a host with another name
            shutil.move(first / "data", second / "data")
            monkeypatch.setattr(socket, "gethostname", lambda: "renamed-host")
            async with daemon(dsn, second) as a, a.client() as ca:
                await until(lambda: caught_up(a))
                assert (await ca.stats())["recall"]["shared"]["origin"] == origin
                rows = await live_rows(dsn, FACT)
                assert [r["origin"] for r in rows] == [origin]  # one row, the same origin
                await ask(cb, "q2", "ana")
                await until(lambda: recalls(cb, "q2", "Miso is allergic"))
                assert await found(cb, "ana", FACT) == 1  # never twice
                # removed on the moved store: no longer recalled on B
                await ca.session_delete("s1")
                await until(lambda: _lacks(cb, "q2", "Miso is allergic"))
                assert not await live_rows(dsn, FACT)
                assert await found(cb, "ana", FACT) == 0
    finally:
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(second, ignore_errors=True)


async def _lacks(c: Any, sid: str, text: str) -> bool:
    return not await recalls(c, sid, text)


async def test_a_copied_data_dir_beside_its_original_is_said_and_publishes_nothing(
        dsn: str) -> None:
    first, copy = short_tmpdir(), short_tmpdir()
    try:
        async with daemon(dsn, first) as a, a.client() as ca:
            await ca.session_open("s1", {"user_id": "ana"})
            await ca.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})
            await until(lambda: caught_up(a))
            await until(lambda: _has_row(dsn, FACT))
        shutil.copytree(first / "data", copy / "data")
        lena = "My sister Lena moved to Porto."
        async with daemon(dsn) as b, b.client() as cb, contextlib.AsyncExitStack() as later:
            async with contextlib.AsyncExitStack() as original:
                a = await original.enter_async_context(daemon(dsn, first))
                ca = await original.enter_async_context(a.client())
                await until(lambda: caught_up(a))
                # the copy starts while the original runs, and outlives it
                a2 = await later.enter_async_context(daemon(dsn, copy))
                ca2 = await later.enter_async_context(a2.client())
                await ca2.session_open("s9", {"user_id": "cleo"})  # wakes the copy's writer

                async def said() -> bool:
                    return bool((await ca2.stats())["recall"]["shared"]["conflict"])

                await until(said)
                st = (await ca2.stats())["recall"]["shared"]
                assert "copy" in st["conflict"] and not st["publishing"]
                # and `memman status` says it
                cli = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "memman_cli.cli", "--socket", str(a2.socket), "status",
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, _ = await cli.communicate()
                assert cli.returncode == 0 and "recall     NOT SHARED: " in out.decode()
                assert "is a copy of its data dir" in out.decode()
                # the copy diverges: what it logs reaches no other host while A runs
                await ca2.session_add("s1", {"role": "user", "content": NEW,
                                             "created_at": MARCH + 60})
                await ca2.session_context("s1", {"max_tokens": 1000})  # indexed, handed over
                assert (await ca2.stats())["recall"]["shared"]["queued"] == 0
                await ask(cb, "q", "ana")
                await until(lambda: recalls(cb, "q", "Miso is allergic"))
                assert await found(cb, "ana", FACT) == 1
                assert not await live_rows(dsn, NEW)
                assert not await recalls(cb, "q", "Kiwi")
                assert len(await live_rows(dsn, FACT)) == 1
                # the original keeps publishing: an entry it adds (under the same id the
                # copy gave its own) reaches B
                await ca.session_add("s1", {"role": "user", "created_at": MARCH + 120,
                                            "content": lena})
                await until(lambda: recalls(cb, "q", "Lena moved"))
                assert (await ca.stats())["recall"]["shared"]["conflict"] is None
                assert not await live_rows(dsn, NEW)
            # the original stops: the copy takes its origin over, and what it logs is the
            # store's now — its entry under that id replaces the original's, FACT stays once
            await until(lambda: caught_up(a2))
            assert (await ca2.stats())["recall"]["shared"]["conflict"] is None
            await until(lambda: recalls(cb, "q", "Kiwi now only eats"))
            await until(lambda: _lacks(cb, "q", "Lena moved"))
            assert await found(cb, "ana", FACT) == 1
            assert len(await live_rows(dsn, FACT)) == 1 and len(await live_rows(dsn, NEW)) == 1
            assert not await live_rows(dsn, lena)
    finally:
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(copy, ignore_errors=True)


async def _has_row(dsn: str, text: str) -> bool:
    return bool(await live_rows(dsn, text))


async def test_rows_published_under_host_and_path_are_adopted_not_duplicated(
        dsn: str) -> None:
    root = short_tmpdir()
    try:
        async with daemon(dsn, root) as a, a.client() as ca:
            await ca.session_open("s1", {"user_id": "ana"})
            fact = await ca.session_add("s1", {"role": "user", "content": FACT,
                                               "created_at": MARCH})
            await until(lambda: _has_row(dsn, FACT))
            origin = a.app.recall.storage.origin
            legacy = a.app.recall.storage.legacy
        # as an older daemon of this file left them: under host:path
        await shared(dsn, "UPDATE recall_rows SET origin=$1 WHERE origin=$2", legacy, origin)
        before = await shared(dsn, "SELECT id FROM recall_rows WHERE content=$1", FACT)
        async with daemon(dsn) as b, b.client() as cb:
            await ask(cb, "q", "ana")
            await until(lambda: recalls(cb, "q", "Miso is allergic"))
            async with daemon(dsn, root) as a, a.client() as ca:
                await until(lambda: caught_up(a))
                rows = await live_rows(dsn, FACT)
                assert [(r["id"], r["origin"]) for r in rows] == [(before[0]["id"], origin)]
                assert not await shared(dsn, "SELECT 1 FROM recall_rows WHERE origin=$1 "
                                             "AND NOT gone", legacy)
                assert await found(cb, "ana", FACT) == 1
                await ca.memory_forget("ana", fact["id"])
                await until(lambda: _lacks(cb, "q", "Miso is allergic"))
                assert await found(cb, "ana", FACT) == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_an_add_right_after_a_clear_reaches_the_other_host(dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        for i in range(4):
            user = f"ana{i}"
            await ca.session_open(f"s{i}", {"user_id": user})
            await ca.session_add(f"s{i}", {"role": "user", "content": FACT, "created_at": MARCH})
            await ask(cb, f"q{i}", user)
            await until(lambda i=i: recalls(cb, f"q{i}", "Miso is allergic"))
            # one batch of the writer: the clear, then the add acknowledged after it
            await ca.session_clear(f"s{i}")
            await ca.session_add(f"s{i}", {"role": "user", "content": NEW,
                                           "created_at": MARCH + 60})
            await until(lambda i=i: recalls(cb, f"q{i}", "Kiwi now only eats"))
            assert not await recalls(cb, f"q{i}", "Miso is allergic")
            assert [r["user_id"] for r in await live_rows(dsn, NEW)] == [user] * (1)
            assert not [r for r in await live_rows(dsn, FACT) if r["user_id"] == user]
            await ca.session_delete(f"s{i}")  # the next round starts with no row of NEW
            await until(lambda: _no_row(dsn, NEW))


async def _no_row(dsn: str, text: str) -> bool:
    return not await live_rows(dsn, text)


async def test_a_session_reassigned_to_another_user_is_recalled_for_them_elsewhere(
        dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        for i in range(4):
            ana, bob = f"ana{i}", f"bob{i}"
            await ca.session_open(f"s{i}", {"user_id": ana})
            await ca.session_add(f"s{i}", {"role": "user", "content": FACT, "created_at": MARCH})
            await ask(cb, f"qa{i}", ana)
            await ask(cb, f"qb{i}", bob)
            await until(lambda i=i: recalls(cb, f"qa{i}", "Miso is allergic"))
            await ca.session_open(f"s{i}", {"user_id": bob, "reassign": True})
            await until(lambda i=i: recalls(cb, f"qb{i}", "Miso is allergic"))
            assert not await recalls(cb, f"qa{i}", "Miso is allergic")  # ana's no more
            assert await found(cb, ana, FACT) == 0 and await found(cb, bob, FACT) == 1
            assert [r["user_id"] for r in await live_rows(dsn, FACT)] == [bob]
            await ca.session_delete(f"s{i}")
            await until(lambda: _no_row(dsn, FACT))


async def test_an_import_with_replace_reaches_the_other_host_with_its_new_content(
        dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        for i in range(4):
            user = f"ana{i}"
            await ca.session_open(f"s{i}", {"user_id": user})
            await ca.session_add(f"s{i}", {"role": "user", "content": FACT, "created_at": MARCH})
            await ask(cb, f"q{i}", user)
            await until(lambda i=i: recalls(cb, f"q{i}", "Miso is allergic"))
            data = await ca.session_export(f"s{i}")
            for e in data["entries"]:
                e["content"] = NEW
            await ca.session_import(data, {"replace": True})
            await until(lambda i=i: recalls(cb, f"q{i}", "Kiwi now only eats"))
            assert not await recalls(cb, f"q{i}", "Miso is allergic")
            assert [r["user_id"] for r in await live_rows(dsn, NEW)] == [user]
            assert not [r for r in await live_rows(dsn, FACT) if r["user_id"] == user]
            await ca.session_delete(f"s{i}")
            await until(lambda: _no_row(dsn, NEW))


async def test_a_forget_on_b_holds_on_a_through_reassign_import_clear_and_restart(
        dsn: str) -> None:
    root = short_tmpdir()
    lena = "My sister Lena moved to Porto last spring."
    try:
        async with daemon(dsn) as b, b.client() as cb:
            async with daemon(dsn, root) as a, a.client() as ca:
                await ca.session_open("s1", {"user_id": "ana"})
                await ca.session_add("s1", {"role": "user", "content": FACT,
                                            "created_at": MARCH})
                await ca.session_add("s1", {"role": "user", "content": lena,
                                            "created_at": MARCH + 60})
                exported = await ca.session_export("s1")  # made before the forget
                await ask(cb, "q", "ana")
                await until(lambda: recalls(cb, "q", "Miso is allergic"))
                rid = next(r["id"] for r in (await cb.memory_search(
                    "ana", "session", "cat allergic chicken", {}))["results"]
                    if r["text"] == FACT)
                await cb.memory_forget("ana", rid)
                await ask(ca, "a2", "ana")
                await until(lambda: _lacks(ca, "a2", "Miso is allergic"))  # A learnt of it

                # the session moves to bob: the forget goes along
                await ca.session_open("s1", {"user_id": "bob", "reassign": True})
                await ask(cb, "qb", "bob")
                await ask(ca, "ab", "bob")
                await until(lambda: recalls(cb, "qb", "Lena moved"))
                await until(lambda: caught_up(a))
                assert not await recalls(cb, "qb", "Miso is allergic")
                assert not await recalls(ca, "ab", "Miso is allergic")
                assert await found(cb, "bob", FACT) == 0 and not await live_rows(dsn, FACT)

                # an import with replace of the export made before: the same statement under
                # a new id, still forgotten; the rest comes back to ana
                await ca.session_import(exported, {"replace": True, "reassign": True})
                await ask(cb, "q2", "ana")
                await until(lambda: recalls(cb, "q2", "Lena moved"))
                await until(lambda: caught_up(a))
                assert not await recalls(cb, "q2", "Miso is allergic")
                await ask(ca, "a3", "ana")
                assert not await recalls(ca, "a3", "Miso is allergic")
                assert not await live_rows(dsn, FACT)
                s1 = await ca.session_get("s1")  # its own session keeps it
                assert any(e["content"] == FACT for e in s1["entries"])

                # cleared, then the export imported again: still forgotten
                await ca.session_clear("s1")
                await ca.session_import(exported, {"replace": True})
                await ask(cb, "q3", "ana")
                await until(lambda: recalls(cb, "q3", "Lena moved"))
                await until(lambda: caught_up(a))
                assert not await recalls(cb, "q3", "Miso is allergic")
                assert not await live_rows(dsn, FACT)
            # A restarts: neither recalls nor shares it
            async with daemon(dsn, root) as a, a.client() as ca:
                await until(lambda: caught_up(a))
                await ask(ca, "a4", "ana")
                text = body(await ca.session_context("a4", {"max_tokens": 1000}))
                assert "Lena moved" in text and "Miso" not in text
                assert not await live_rows(dsn, FACT)
                assert await found(cb, "ana", FACT) == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _said_on_a(ca: Any) -> None:
    await ca.session_open("s1", {"user_id": "ana"})
    await ca.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})


async def _excluded_by_q(cb: Any) -> None:
    """B's session q recalls A's statement, then excludes it."""
    await ask(cb, "q", "ana")
    await until(lambda: recalls(cb, "q", "Miso is allergic"))
    rid = next(r["entry_id"] for r in (await cb.session_preview(
        "q", {"max_tokens": 1000}))["recalled"])
    await cb.recall_exclude("q", rid)
    assert not await recalls(cb, "q", "Miso is allergic")


async def test_an_exclusion_on_b_of_an_entry_said_on_a_holds_across_a_move_and_restarts(
        dsn: str) -> None:
    a_root, moved, b_root = short_tmpdir(), short_tmpdir(), short_tmpdir()
    try:
        async with daemon(dsn, a_root) as a, a.client() as ca:
            await _said_on_a(ca)
            async with daemon(dsn, b_root) as b, b.client() as cb:
                await _excluded_by_q(cb)
        shutil.move(a_root / "data", moved / "data")
        async with daemon(dsn, moved) as a, a.client() as ca, \
                daemon(dsn, b_root) as b, b.client() as cb:
            await until(lambda: caught_up(a))
            await ask(cb, "q2", "ana")  # another session of hers recalls it ...
            await until(lambda: recalls(cb, "q2", "Miso is allergic"))
            assert not await recalls(cb, "q", "Miso is allergic")  # ... q still does not
            assert await found(cb, "ana", FACT) == 1
            # A's session replaced by an import of itself: the same statement under a new
            # id (a new shared row), still not recalled by q
            before = {r["id"] for r in await live_rows(dsn, FACT)}
            await ca.session_import(await ca.session_export("s1"), {"replace": True})
            await until(lambda: _moved_to_new_row(dsn, before))
            await ask(cb, "q3", "ana")
            await until(lambda: recalls(cb, "q3", "Miso is allergic"))
            assert not await recalls(cb, "q", "Miso is allergic")
        async with daemon(dsn, b_root) as b, b.client() as cb:  # and after B's restart
            await ask(cb, "q4", "ana")
            await until(lambda: recalls(cb, "q4", "Miso is allergic"))
            assert not await recalls(cb, "q", "Miso is allergic")
    finally:
        for d in (a_root, moved, b_root):
            shutil.rmtree(d, ignore_errors=True)


async def test_an_exclusion_holds_when_the_statement_comes_back_under_a_new_id_while_b_is_down(
        dsn: str) -> None:
    # B never sees the old row go: its first read after the restart skips removed rows, so
    # only what B recorded of the excluded statement can find it again under its new id
    a_root, b_root = short_tmpdir(), short_tmpdir()
    try:
        async with daemon(dsn, a_root) as a, a.client() as ca:
            await _said_on_a(ca)
            async with daemon(dsn, b_root) as b, b.client() as cb:
                await _excluded_by_q(cb)
            # B is down: A replaces its session by an import of itself (a new shared row)
            before = {r["id"] for r in await live_rows(dsn, FACT)}
            await ca.session_import(await ca.session_export("s1"), {"replace": True})
            await until(lambda: _moved_to_new_row(dsn, before))
            async with daemon(dsn, b_root) as b, b.client() as cb:
                await ask(cb, "q2", "ana")  # another session of hers recalls the new row
                await until(lambda: recalls(cb, "q2", "Miso is allergic"))
                assert not await recalls(cb, "q", "Miso is allergic")
            async with daemon(dsn, b_root) as b, b.client() as cb:  # and after one more
                await ask(cb, "q3", "ana")
                await until(lambda: recalls(cb, "q3", "Miso is allergic"))
                assert not await recalls(cb, "q", "Miso is allergic")
    finally:
        for d in (a_root, b_root):
            shutil.rmtree(d, ignore_errors=True)


async def test_a_read_only_daemon_recalls_the_others_and_publishes_nothing(dsn: str) -> None:
    root = short_tmpdir()
    try:
        async with daemon(dsn, root) as a, a.client() as ca:
            await ca.session_open("s1", {"user_id": "ana"})
            await ca.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})
            await until(lambda: _has_row(dsn, FACT))
        await shared(dsn, "UPDATE recall_rows SET gone=true, content='', text=''")
        async with daemon(dsn) as b, b.client() as cb, \
                running_daemon(root, clock=FakeClock(), read_only=True,
                               storage={"shared": dsn}) as ro, ro.client() as cro:
            await cb.session_open("b1", {"user_id": "ana"})
            await cb.session_add("b1", {"role": "user", "created_at": MARCH,
                                        "content": "My sister Lena moved to Porto last spring."})
            st = (await cro.stats())["recall"]["shared"]
            assert st["read_only"] and not st["publishing"] and st["conflict"] is None
            async def recalled() -> bool:  # B's entry, found on the read-only daemon
                got = (await cro.memory_search("ana", "session", "sister Porto", {}))["results"]
                return any("Lena moved" in r["text"] for r in got)

            await until(recalled)
            # and nothing of its own written: its FACT stays a tombstone
            assert not await live_rows(dsn, FACT)
            assert (await cro.stats())["recall"]["shared"]["conflict"] is None
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _moved_to_new_row(dsn: str, before: set[int]) -> bool:
    ids = {r["id"] for r in await live_rows(dsn, FACT)}
    return bool(ids) and not ids & before


def test_a_copy_takes_the_origin_over_when_its_original_is_killed(dsn: str) -> None:
    """Subprocess daemons: the original's claim ends with its process, kill -9 included."""
    import json
    import subprocess
    import time

    from memman import SyncClient
    from tests.helpers import daemon_env, daemon_process

    def status(p: Any) -> dict[str, Any]:
        r = subprocess.run([sys.executable, "-m", "memman_cli.cli", "--socket", str(p.socket),
                            "--json", "status"], capture_output=True, text=True, timeout=60,
                           env=daemon_env(p.root))
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout)["recall"]["shared"])

    def wait(cond: Callable[[], bool]) -> None:
        for _ in range(600):  # bounded: at most 600 polls
            if cond():
                return
            time.sleep(0.1)
        raise AssertionError("condition not met")

    first, copy = short_tmpdir(), short_tmpdir()
    try:
        with daemon_process(first, "--shared", dsn) as a:
            with SyncClient(a.socket) as mm:
                mm.session_open("s1", {"user_id": "ana"})
                mm.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})
            wait(lambda: bool(asyncio.run(live_rows(dsn, FACT))))
        shutil.copytree(first / "data", copy / "data")
        with daemon_process(first, "--shared", dsn) as a:
            wait(lambda: status(a)["publishing"])
            with daemon_process(copy, "--shared", dsn) as c:
                with SyncClient(c.socket) as mm:  # the copy's writer wakes
                    mm.session_add("s1", {"role": "user", "content": NEW,
                                          "created_at": MARCH + 60})
                wait(lambda: bool(status(c)["conflict"]))
                assert not asyncio.run(live_rows(dsn, NEW))
                a.kill9()
                wait(lambda: status(c)["publishing"])  # the lock went with the process
                assert status(c)["conflict"] is None
                wait(lambda: bool(asyncio.run(live_rows(dsn, NEW))))
                assert len(asyncio.run(live_rows(dsn, FACT))) == 1
    finally:
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(copy, ignore_errors=True)


async def test_a_session_deleted_and_opened_again_at_once_keeps_its_new_entry_elsewhere(
        dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        for i in range(4):
            user = f"ana{i}"
            await ca.session_open("s", {"user_id": user})
            fact = await ca.session_add("s", {"role": "user", "content": FACT,
                                              "created_at": MARCH})
            await ask(cb, f"q{i}", user)
            await until(lambda i=i: recalls(cb, f"q{i}", "Miso is allergic"))
            # an entry removed, the session deleted, opened again and added to: one batch
            await ca.session_remove("s", fact["id"])
            await ca.session_delete("s")
            await ca.session_open("s", {"user_id": user})
            await ca.session_add("s", {"role": "user", "content": NEW, "created_at": MARCH + 60})
            await until(lambda i=i: recalls(cb, f"q{i}", "Kiwi now only eats"))
            assert not await recalls(cb, f"q{i}", "Miso is allergic")
            assert [r["user_id"] for r in await live_rows(dsn, NEW)] == [user]
            assert not await live_rows(dsn, FACT)
            await ca.session_delete("s")
            await until(lambda: _no_row(dsn, NEW))
