"""Two daemons, each with its own socket and SQLite file, sharing one real PostgreSQL server
(temporary directory, Unix socket): what one learns the other recalls, the database decides
conflicting promotions, events cross over LISTEN/NOTIFY, agent.md follows the shared store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memman import names
from memman.config import Config
from memman.errors import CONFLICT, MemmanError
from memman_daemon.clock import FakeClock
from tests.helpers import (
    RunningDaemon,
    daemon_env,
    daemon_process,
    running_daemon,
    short_tmpdir,
    stop_process,
    wait_for_socket,
)
from tests.pg_server import fresh_db, session_server


@pytest.fixture
def dsn() -> str:
    return fresh_db(session_server())


@contextlib.asynccontextmanager
async def two_daemons(dsn: str, **sections: Any) -> AsyncIterator[tuple[RunningDaemon,
                                                                        RunningDaemon]]:
    async with running_daemon(clock=FakeClock(), storage={"shared": dsn}, **sections) as a, \
            running_daemon(clock=FakeClock(), storage={"shared": dsn}, **sections) as b:
        yield a, b


async def until(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0) -> None:
    """Wait for a condition (never a fixed sleep)."""
    async def poll() -> None:
        while True:
            r = cond()
            if isinstance(r, Awaitable):
                r = await r
            if r:
                return
            await asyncio.sleep(0.02)
    await asyncio.wait_for(poll(), timeout)


async def test_learn_on_one_recall_on_the_other(dsn: str) -> None:
    async with two_daemons(dsn) as (a, b), a.client() as ca, b.client() as cb:
        assert a.app.storage.name == b.app.storage.name == "postgresql"
        assert a.app.config.database_path != b.app.config.database_path
        await ca.call(names.MEMORY_LEARN, "ana", "tone", "brief, no emojis")
        assert (await cb.call(names.MEMORY_RECALL, "ana", "tone"))["value"] == "brief, no emojis"
        # a change on B is what A reads next (nothing cached per daemon)
        r = await cb.call(names.MEMORY_LEARN, "ana", "tone", "formal")
        assert r["previous"] == "brief, no emojis"
        assert (await ca.call(names.MEMORY_RECALL, "ana", "tone"))["value"] == "formal"
        await ca.call(names.MEMORY_APPEND, "ana", "episodic",
                      {"content": "Deployed the billing service to eu-west"})
        await ca.call(names.MEMORY_APPEND, "ana", "procedural",
                      {"content": "answer with a table", "condition": "asked for numbers"})
        hits = (await cb.call(names.MEMORY_SEARCH, "ana", "episodic", "billing deploy"))
        assert hits["results"][0]["content"] == "Deployed the billing service to eu-west"
        rules = (await cb.call(names.MEMORY_SEARCH, "ana", "procedural", "numbers"))["results"]
        assert rules[0]["action"] == "answer with a table"
        st = await cb.call(names.MEMORY_STATS, "ana")
        assert st["semantic_entry_count"] == 1 and st["episodic_entry_count"] == 1
        await cb.call(names.DOCS_ADD, "acme", {"doc_id": "q3", "content":
                                               "Q3 revenue grew 12% on the mobile launch."})
        assert [d["doc_id"] for d in (await ca.call(names.DOCS_LIST, "acme"))["docs"]] == ["q3"]
        found = (await ca.call(names.DOCS_SEARCH, "acme", "mobile revenue"))["results"]
        assert found[0]["doc_id"] == "q3"
        # sessions stay local: B does not know A's session
        await ca.session_open("s-a", {"user_id": "ana"})
        assert [s["session_id"] for s in await cb.session_list()] == []
        # both report the shared store
        for c in (ca, cb):
            shared = (await c.stats())["shared"]
            assert shared["backend"] == "postgresql" and shared["state"] == "up"
            assert shared["schema_version"] >= 1 and "password" not in shared["dsn"]


async def _snippet(c: Any, session: str, text: str) -> int:
    return (await c.call(names.SCRATCHPAD_WRITE, session, text))["snippet"]["id"]


async def test_conflicting_promotions_are_decided_by_the_database(dsn: str) -> None:
    async with two_daemons(dsn) as (a, b), a.client() as ca, b.client() as cb:
        await ca.session_open("sa", {"user_id": "ana", "tenant_id": "acme"})
        await cb.session_open("sb", {"user_id": "ana", "tenant_id": "acme"})
        # one after the other: the second sees the first's value
        x = await _snippet(ca, "sa", "The user prefers dark mode")
        y = await _snippet(cb, "sb", "The user prefers light mode")
        r = await ca.call(names.SCRATCHPAD_PROMOTE, "sa", x, "preference", {"key": "theme"})
        assert r["changed"] and r["ref"] == "preference:theme"
        with pytest.raises(MemmanError) as ei:
            await cb.call(names.SCRATCHPAD_PROMOTE, "sb", y, "preference", {"key": "theme"})
        assert ei.value.code == CONFLICT
        assert ei.value.data["existing"] == "The user prefers dark mode"
        # at the same moment, many keys: for each key exactly one wins, the other is told who
        rounds = 12
        for i in range(rounds):
            sa = await _snippet(ca, "sa", f"value from A number {i}")
            sb = await _snippet(cb, "sb", f"value from B number {i}")
            res = await asyncio.gather(
                ca.call(names.SCRATCHPAD_PROMOTE, "sa", sa, "rule", {"condition": f"c{i}"}),
                cb.call(names.SCRATCHPAD_PROMOTE, "sb", sb, "rule", {"condition": f"c{i}"}),
                return_exceptions=True)
            wins = [r for r in res if not isinstance(r, BaseException)]
            losses = [r for r in res if isinstance(r, BaseException)]
            assert len(wins) == 1 and len(losses) == 1, res
            loss = losses[0]
            assert isinstance(loss, MemmanError) and loss.code == CONFLICT, loss
            winner_text = f"value from {'A' if res[0] is wins[0] else 'B'} number {i}"
            assert loss.data["existing"] == winner_text
        # the shared store holds one live rule per key, the winner's
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT key, content FROM memories WHERE kind='rule' AND "
                                    "archived_by IS NULL ORDER BY key")
            audit = await conn.fetchval("SELECT count(*) FROM audit WHERE action='promote'")
        finally:
            await conn.close()
        assert len(rows) == rounds and len({r["key"] for r in rows}) == rounds
        assert audit == 1 + rounds  # the theme promotion and one per key; losers left none
        # agent.md: the same key promoted from both hosts
        p = await _snippet(ca, "sa", "Fiscal year starts in April.")
        q = await _snippet(cb, "sb", "Fiscal year starts in July.")
        await ca.call(names.SCRATCHPAD_PROMOTE, "sa", p, "business", {"key": "fiscal year"})
        with pytest.raises(MemmanError) as ei:
            await cb.call(names.SCRATCHPAD_PROMOTE, "sb", q, "business", {"key": "fiscal year"})
        assert ei.value.code == CONFLICT
        assert ei.value.data["existing"] == "Fiscal year starts in April."


async def test_an_event_reaches_a_subscriber_of_the_other_daemon(dsn: str) -> None:
    async with two_daemons(dsn) as (a, b), a.client() as ca, b.client() as cb:
        got: list[tuple[str, dict[str, Any]]] = []
        await cb.subscribe(["memory", "docs"], {}, lambda n, p: got.append((n, p)))
        mine: list[dict[str, Any]] = []
        await ca.subscribe(["memory"], {}, lambda n, p: mine.append(p))
        await ca.session_open("sa", {"user_id": "ana", "tenant_id": "acme"})
        sn = await _snippet(ca, "sa", "The user likes short answers")
        await ca.call(names.SCRATCHPAD_PROMOTE, "sa", sn, "preference", {"key": "length"})
        await ca.call(names.DOCS_ADD, "acme", {"doc_id": "d", "content": "launch plan"})
        await until(lambda: len(got) >= 2)
        (n1, e1), (n2, e2) = got[:2]
        assert n1 == "memman_memory_event" and e1["kind"] == "learned"
        assert e1["record"]["key"] == "length" and e1["user_id"] == "ana"
        assert e1["origin"] == a.app.shared.origin
        assert n2 == "memman_docs_event" and e2["kind"] == "added" and e2["tenant_id"] == "acme"
        assert [e["seq"] for _, e in got] == list(range(1, len(got) + 1))  # B's own numbering
        # a daemon does not hear its own events twice
        assert [e["kind"] for e in mine] == ["learned"] and "origin" not in mine[0]
        # a filtered subscription on B applies to remote events as to local ones
        other: list[dict[str, Any]] = []
        await cb.subscribe(["memory"], {"user_id": "bob"}, lambda n, p: other.append(p))
        await ca.call(names.MEMORY_LEARN, "ana", "x", "1")
        await ca.call(names.MEMORY_LEARN, "bob", "y", "2")
        await until(lambda: len(other) == 1)
        assert other[0]["user_id"] == "bob" and other[0]["seq"] == 1


async def test_agent_md_follows_the_shared_store_on_every_host(dsn: str) -> None:
    async with two_daemons(dsn) as (a, b), a.client() as ca, b.client() as cb:
        pa = Path(a.app.config.agent_md_path("acme"))
        pb = Path(b.app.config.agent_md_path("acme"))
        assert pa != pb
        await ca.session_open("sa", {"user_id": "ana", "tenant_id": "acme"})
        sn = await _snippet(ca, "sa", "Signups spike every first Monday.")
        await ca.call(names.SCRATCHPAD_PROMOTE, "sa", sn, "business")
        assert "- Signups spike every first Monday." in pa.read_text()
        # B's file is regenerated from the shared store
        await until(lambda: pb.exists() and "first Monday" in pb.read_text())
        assert pb.read_text() == pa.read_text()
        hits = (await cb.call(names.DOCS_SEARCH, "acme", "signups monday"))["results"]
        assert hits[0]["doc_id"] == "agent.md"
        # an edit on disk on B is imported (last writer wins) and reaches A's file, audited
        edited = pb.read_text() + "- Churn is measured monthly.\n"
        pb.write_text(edited)
        await until(lambda: pa.read_text() == edited)
        hits = (await ca.call(names.DOCS_SEARCH, "acme", "churn monthly"))["results"]
        assert hits and hits[0]["doc_id"] == "agent.md"
        audit = (await ca.call(names.AUDIT_LIST, {"tenant_id": "acme", "action": "import"}))
        assert audit["records"] and audit["records"][0]["target"] == "agent.md:acme"
        assert audit["records"][0]["data"]["host"] == b.app.shared.origin
        # a later edit on A wins over B's
        final = edited.replace("monthly", "weekly")
        pa.write_text(final)
        await until(lambda: pb.read_text() == final)
        # removing the document removes the shared content and every host's file
        await cb.call(names.DOCS_DELETE, "acme", "agent.md")
        await until(lambda: not pa.exists() and not pb.exists())
        assert (await ca.call(names.DOCS_LIST, "acme"))["docs"] == []


async def test_bad_shared_url_and_a_newer_schema_are_refused(dsn: str) -> None:
    with pytest.raises(ValueError, match="postgresql://"):
        async with running_daemon(storage={"shared": "mysql://x"}):
            pass
    async with running_daemon(storage={"shared": dsn}):
        pass  # creates the schema
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("UPDATE memman_schema SET version = version + 1")
    finally:
        await conn.close()
    from memman_daemon.storage.sqlite.store import StoreError
    with pytest.raises(StoreError, match="newer than this memman understands"):
        async with running_daemon(storage={"shared": dsn}):
            pass


def test_flag_and_environment_choose_the_shared_store(dsn: str) -> None:
    """`memman daemon --shared URL` and MEMMAN_STORAGE_SHARED (subprocess daemons), seen
    through `memman status`."""
    def status(sock: Path, env: dict[str, str]) -> dict[str, Any]:
        r = subprocess.run([sys.executable, "-m", "memman_cli.cli", "--socket", str(sock), "--json",
                            "status"], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    with daemon_process(None, "--shared", dsn) as p:
        st = status(p.socket, daemon_env(p.root))
        assert st["shared"]["backend"] == "postgresql" and st["shared"]["state"] == "up"
        r = subprocess.run([sys.executable, "-m", "memman_cli.cli", "--socket", str(p.socket),
                            "status"], capture_output=True, text=True, timeout=60,
                           env=daemon_env(p.root))
        assert "shared" in r.stdout and "— up" in r.stdout
    root = short_tmpdir()
    env = {**daemon_env(root), "MEMMAN_STORAGE_SHARED": dsn}
    sock = root / "s" / "memman.sock"
    proc = subprocess.Popen([sys.executable, "-m", "memman_daemon", "--socket", str(sock),
                             "--data-dir", str(root / "data")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_socket(sock, proc)
        assert status(sock, env)["shared"]["backend"] == "postgresql"
    finally:
        stop_process(proc)
    with daemon_process() as p:  # the default: everything in the SQLite file
        assert status(p.socket, daemon_env(p.root))["shared"] == {"backend": "sqlite",
                                                                  "state": "local"}


def test_config_lists_the_shared_store_without_its_password() -> None:
    cfg = Config.load("/nonexistent/config.toml",
                      overrides={"storage": {"shared": "postgresql://mm:s3cret@db.internal/mm"}})
    row = next(r for r in cfg.describe() if r["key"] == "storage.shared")
    assert row["value"] == "postgresql://mm:***@db.internal/mm"


async def test_undo_does_not_skip_a_shared_promotion(dsn: str) -> None:
    """memman_undo reverses local actions; a newer promotion in the shared store is named in
    the answer instead of an older action being undone in its place."""
    clock = FakeClock()
    async with running_daemon(clock=clock, storage={"shared": dsn}) as d, \
            d.client(name="agent") as c:
        await c.session_open("s", {"user_id": "ana"})
        a = await _snippet(c, "s", "a note to evict")
        b = await _snippet(c, "s", "The user prefers tea")
        await c.call(names.SCRATCHPAD_EVICT, "s", a)
        clock.advance(1)
        await c.call(names.SCRATCHPAD_PROMOTE, "s", b, "preference", {"key": "drink"})
        with pytest.raises(MemmanError) as ei:
            await c.call(names.UNDO)
        assert ei.value.code == CONFLICT and "drink" in ei.value.message
        assert ei.value.data["promotion"]["target"] == "preference:drink"
        assert a not in [s["id"] for s in (await c.call(names.SCRATCHPAD_READ, "s"))["snippets"]]
        assert (await c.call(names.MEMORY_RECALL, "ana", "drink"))["value"] == "The user prefers tea"


async def test_concurrent_business_promotions_on_a_tenant_without_agent_md(dsn: str) -> None:
    """Issue 22: two daemons promote to business at the same moment, on a tenant that has no
    agent.md row yet (nothing for SELECT ... FOR UPDATE to lock): both lines survive, in the
    shared row and in both hosts' files. 20 rounds, a fresh tenant each."""
    async with two_daemons(dsn, docs={"watch": False}) as (a, b), a.client() as ca, \
            b.client() as cb:
        for i in range(20):
            tenant = f"t{i}"
            await ca.session_open(f"sa{i}", {"user_id": "ana", "tenant_id": tenant})
            await cb.session_open(f"sb{i}", {"user_id": "ana", "tenant_id": tenant})
            x = await _snippet(ca, f"sa{i}", f"Invoices close on day {i} from A.")
            y = await _snippet(cb, f"sb{i}", f"Refunds need approval {i} from B.")
            res = await asyncio.gather(
                ca.call(names.SCRATCHPAD_PROMOTE, f"sa{i}", x, "business"),
                cb.call(names.SCRATCHPAD_PROMOTE, f"sb{i}", y, "business"),
                return_exceptions=True)
            assert not [r for r in res if isinstance(r, BaseException)], res
            conn = await asyncpg.connect(dsn)
            try:
                content = await conn.fetchval("SELECT content FROM agent_md WHERE tenant_id=$1",
                                              tenant)
            finally:
                await conn.close()
            assert f"day {i} from A" in content and f"approval {i} from B" in content, content
