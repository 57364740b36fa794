"""Files on disk (issue 22): config.toml and agent.md opened without blocking, anything but a
regular file refused with a logged error, read off the event loop with a size cap; the config
watcher survives its errors and shutdown always completes; a reloaded socket or data dir is
"restart needed", not applied."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memman import names
from memman.client import Client
from memman.config import Config
from memman.errors import CONFLICT, MemmanError
from tests.helpers import RunningDaemon, daemon_env, running_daemon, short_tmpdir, wait_for_socket
from tests.wire import blocking_ping


async def until(cond, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.05)


def _replace_with(path: Path, kind: str) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"# agent.md\n\n- caf\xe9 \xff\xfe is not UTF-8\n")



@contextlib.asynccontextmanager
async def _watched() -> AsyncIterator[tuple[RunningDaemon, Client, Path]]:
    """A daemon reading its own config.toml, once its config watch is in place."""
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[context]\nmax_tokens = 4000\n")
    cfg = Config.load(cfg_file, socket=root / "s" / "m.sock", data_dir=root / "data")
    async with running_daemon(root, config=cfg) as d, d.client() as c:
        watch = d.app.config_watch
        await until(lambda: watch._task is not None)
        await asyncio.sleep(0.3)  # the watch is in place
        yield d, c, cfg_file

@pytest.mark.parametrize("kind", ["fifo", "directory"])
async def test_config_replaced_by_a_fifo_or_directory_is_refused_and_the_watch_goes_on(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    async with _watched() as (d, c, cfg_file):
        watch = d.app.config_watch
        _replace_with(cfg_file, kind)
        await until(lambda: watch.last_error is not None and "not a regular file" in
                    watch.last_error)
        assert "a FIFO" in watch.last_error if kind == "fifo" else "a directory" in watch.last_error
        assert await c.ping() == "pong"  # never blocked on the FIFO
        assert d.app.config.context.max_tokens == 4000
        # the watcher keeps running: a good file again is applied
        _replace_with(cfg_file, "none")
        cfg_file.unlink()
        cfg_file.write_text("[context]\nmax_tokens = 5000\n")
        await until(lambda: d.app.config.context.max_tokens == 5000)


async def test_a_reloaded_socket_or_data_dir_is_restart_needed_not_applied(
        caplog: pytest.LogCaptureFixture) -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[context]\nmax_tokens = 4000\n")
    cfg = Config.load(cfg_file, socket=root / "s" / "m.sock", data_dir=root / "data")
    async with running_daemon(root, config=cfg) as d:
        cfg_file.write_text(f'socket = "{root}/other.sock"\ndata_dir = "{root}/elsewhere"\n'
                            "[context]\nmax_tokens = 4500\n")
        with caplog.at_level("WARNING"):
            assert d.app.config_watch.reload()
        assert d.app.config.context.max_tokens == 4500
        assert d.app.config.socket == root / "s" / "m.sock"
        assert d.app.config.data_dir == root / "data"
        said = [r.getMessage() for r in caplog.records if "restart needed" in r.getMessage()]
        assert len(said) == 2 and "socket" in said[0] and "data_dir" in said[1], said


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_bad_config_at_start_is_refused_with_a_clear_message(kind: str) -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    _replace_with(cfg_file, kind)
    env = {**daemon_env(root), "MEMMAN_CONFIG": str(cfg_file)}
    r = subprocess.run([sys.executable, "-m", "memman_daemon", "--socket", str(root / "s" /
                        "m.sock"), "--data-dir", str(root / "data")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "not a regular file" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_sigterm_stops_the_daemon_after_a_watcher_error() -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[context]\nmax_tokens = 4000\n")
    env = {**daemon_env(root), "MEMMAN_CONFIG": str(cfg_file)}
    sock = root / "s" / "m.sock"
    with open(root / "log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memman_daemon", "--socket", str(sock),
                                 "--data-dir", str(root / "data")], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        wait_for_socket(sock, proc)
        deadline = time.monotonic() + 30
        n = 4001
        while "config reloaded" not in (root / "log").read_text():  # the watch is in place
            assert time.monotonic() < deadline, (root / "log").read_text()
            cfg_file.write_text(f"[context]\nmax_tokens = {n}\n")
            n += 1
            time.sleep(1.0)  # a file rewritten faster than it settles is not applied yet
        _replace_with(cfg_file, "directory")
        while "not a regular file" not in (root / "log").read_text():
            assert time.monotonic() < deadline, (root / "log").read_text()
            time.sleep(0.1)
        assert blocking_ping(sock) == "pong"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_fifo_agent_md_at_start_does_not_block_readiness() -> None:
    root = short_tmpdir()
    tenant_dir = root / "data" / "tenants" / "acme"
    tenant_dir.mkdir(parents=True)
    os.mkfifo(tenant_dir / "agent.md")
    async def start() -> None:
        async with running_daemon(root) as d, d.client() as c:
            assert await c.ping() == "pong"
            assert d.app.agent_md.unreadable >= 1
            st = await c.stats()
            assert st["agent_md"]["unreadable"] >= 1
    await asyncio.wait_for(start(), 60)


@pytest.mark.parametrize("kind", ["invalid utf-8", "directory", "fifo"])
async def test_promote_to_business_with_an_unusable_agent_md_is_a_clear_error(kind: str) -> None:
    async with running_daemon(docs={"watch": False}) as d, d.client() as c:
        await c.session_open("s", {"tenant_id": "acme", "user_id": "u"})
        path = Path(d.app.config.agent_md_path("acme"))
        w = await c.call(names.SCRATCHPAD_WRITE, "s", "Invoices close on the 5th.")
        await c.call(names.SCRATCHPAD_PROMOTE, "s", w["snippet"]["id"], "business")
        assert "Invoices close" in path.read_text()
        _replace_with(path, kind.split()[-1] if kind != "invalid utf-8" else "bytes")
        # the undo of that promotion meets the unusable file
        with pytest.raises(MemmanError) as err:
            await c.call(names.UNDO, {})
        assert err.value.code == CONFLICT and str(path) in err.value.message, err.value
        w = await c.call(names.SCRATCHPAD_WRITE, "s", "Refunds need approval.")
        with pytest.raises(MemmanError) as err:
            await c.call(names.SCRATCHPAD_PROMOTE, "s", w["snippet"]["id"], "business")
        assert err.value.code == CONFLICT and str(path) in err.value.message, err.value
        expected = {"invalid utf-8": "not UTF-8", "directory": "a directory",
                    "fifo": "a FIFO"}[kind]
        assert expected in err.value.message
        assert await c.ping() == "pong"


async def test_agent_md_over_its_cap_is_refused_with_the_limit_named() -> None:
    async with running_daemon(docs={"watch": False, "agent_md_max_bytes": 1000}) as d, \
            d.client() as c:
        path = Path(d.app.config.agent_md_path("acme"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# agent.md\n" + "- a line of business context\n" * 100)
        out = await d.app.agent_md.ingest("acme")
        assert "docs.agent_md_max_bytes" in out["error"]
        assert await c.ping() == "pong"


async def test_the_agent_md_watch_survives_its_directory_going_away() -> None:
    """The tenants directory is removed under the watcher, then made again: a new agent.md
    in it is still ingested (the watch was logged and started again, or never stopped)."""
    async with running_daemon() as d, d.client() as c:
        md = d.app.agent_md
        await until(lambda: md.watching is not None)
        await asyncio.sleep(0.3)
        shutil.rmtree(md.root)
        await asyncio.sleep(1.5)
        path = Path(d.app.config.agent_md_path("acme"))
        path.parent.mkdir(parents=True, exist_ok=True)
        before = md.ingests
        deadline = time.monotonic() + 20
        n = 0
        while md.ingests == before:  # rewritten until seen: the watch may be starting again
            assert time.monotonic() < deadline, md.stats()
            path.write_text(f"# agent.md\n\n- Invoices close on the 5th ({n}).\n")
            n += 1
            await asyncio.sleep(0.5)
        hits = (await c.call(names.DOCS_SEARCH, "acme", "invoices close"))["results"]
        assert hits and hits[0]["doc_id"] == "agent.md"


@pytest.mark.parametrize("kind", ["valid", "garbage"])
async def test_a_100_mb_config_written_in_chunks_is_refused_whole_then_an_edit_is_applied(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100 MB config.toml (a budget and one long comment, or garbage) written slowly while
    the daemon runs: no half-written version is applied (the budget it names never takes
    effect, a half that parses never resets the others), the whole is refused naming the
    limit — log, stats and `memman status` — and the next normal edit is applied."""
    from memman_daemon import config_watch

    # the writer below pauses 0.2 s at times (a loaded machine): far less than this
    monkeypatch.setattr(config_watch, "SETTLE_S", 2.0)
    async with _watched() as (d, c, cfg_file):
        watch = d.app.config_watch
        head = b"[context]\nmax_tokens = 9000\n#" if kind == "valid" else b"\x00\xff[[["
        chunk = (b"x" if kind == "valid" else bytes(range(256))) * (1 << 20)
        chunk = chunk[:1 << 20]

        def write() -> None:
            with open(cfg_file, "wb") as f:  # in place, as `cat big > config.toml` does
                f.write(head + chunk[:256 * 1024])
                f.flush()
                time.sleep(0.2)  # long enough for the watcher to see a half-written file
                for i in range(100):
                    f.write(chunk)
                    f.flush()
                    if i % 25 == 0:
                        time.sleep(0.2)
                f.write(b"\n")

        values = []

        async def sample() -> None:
            while True:
                values.append(d.app.config.context.max_tokens)
                await asyncio.sleep(0.01)

        sampler = asyncio.create_task(sample())
        try:
            await asyncio.to_thread(write)
            await until(lambda: watch.last_error is not None and "1048576-byte limit" in
                        watch.last_error, timeout=60)
        finally:
            sampler.cancel()
        assert set(values) == {4000}, sorted(set(values))
        assert d.app.config.context.max_tokens == 4000
        st = await c.stats()
        assert "over the 1048576-byte limit" in st["config"]["last_error"]
        r = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "memman_cli.cli", "--socket",
                             str(d.socket), "status"], capture_output=True, text=True,
            timeout=60)
        assert "NOT APPLIED" in r.stdout and "1048576-byte limit" in r.stdout, r.stdout
        # a normal edit afterwards is applied
        cfg_file.write_text("[context]\nmax_tokens = 5000\n")
        await until(lambda: d.app.config.context.max_tokens == 5000, timeout=60)
        assert (await c.stats())["config"]["last_error"] is None


async def test_other_clients_are_answered_while_a_50_mb_agent_md_is_ingested() -> None:
    """Reading, hashing, chunking and the rows of a 50 MB agent.md run on worker threads
    that never hold the interpreter long (the tokens as one numpy array, not ten million
    ints): another client's pings keep being answered while the tenant's ingest runs."""
    async with running_daemon(embeddings={"provider": "none"}) as d, \
            d.client("other") as c:
        md = d.app.agent_md
        await until(lambda: md.watching is not None)
        path = Path(d.app.config.agent_md_path("acme"))
        path.parent.mkdir(parents=True, exist_ok=True)
        line = "- Invoices close on the 5th of every month; refunds need approval.\n"
        text = "# agent.md\n\n" + line * (50_000_000 // len(line)) + "- zebra quux.\n"
        tmp = path.with_name("agent.md.tmp")
        await asyncio.to_thread(tmp.write_text, text)
        before = md.ingests
        os.replace(tmp, path)
        lock = md._lock("acme")
        await until(lock.locked, timeout=60)  # the ingest has begun
        during, gaps, last = 0, [], time.monotonic()
        for _ in range(20_000):  # bounded: the ingest ends long before
            await asyncio.sleep(0.005)
            assert await c.ping() == "pong"
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            if md.ingests > before:
                break
            during += lock.locked()
        assert md.ingests > before
        assert during >= 20, during  # answered all along, not once the ingest was done
        # generous: a loaded machine, and a loop held for seconds would still show
        assert max(gaps) < 1.5, max(gaps)
        hits = (await c.call(names.DOCS_SEARCH, "acme", "zebra quux"))["results"]
        assert hits and "zebra" in hits[0]["text"]


async def _found(c, word: str) -> bool:
    hits = (await c.call(names.DOCS_SEARCH, "acme", word))["results"]
    return bool(hits) and word in hits[0]["text"]


async def _until_found(c, word: str, rounds: int = 300) -> None:
    for _ in range(rounds):  # bounded: 30 s of 0.1 s waits
        if await _found(c, word):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{word} never ingested")


async def test_agent_md_back_to_a_file_after_a_fifo_or_directory_is_ingested() -> None:
    """Through the real watcher: agent.md becomes a FIFO or a directory, then a file again —
    by rename over it or unlink and create, right away or after the watcher saw the bad
    version — and each new file's content is ingested."""
    async with running_daemon(embeddings={"provider": "none"}) as d, d.client() as c:
        md = d.app.agent_md
        await until(lambda: md.watching is not None)
        path = Path(d.app.config.agent_md_path("acme"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# agent.md\n\n- start.\n")
        orderings = [(bad, how, pause) for pause in (0.0, 0.3) for bad in ("fifo", "directory")
                     for how in ("rename", "unlink")]
        for i, (bad, how, pause) in enumerate(orderings):
            _replace_with(path, bad)
            if bad == "directory":
                (path / "inside.md").write_text("not agent.md\n")
            if pause:
                before = md.unreadable
                await until(lambda b=before: md.unreadable > b)  # the bad version was seen
            word = f"zebra{i}quux"
            content = f"# agent.md\n\n- The code word is {word}.\n"
            if bad == "directory":
                shutil.rmtree(path)
            elif how == "unlink":
                path.unlink()
            if how == "rename":
                tmp = path.with_name("agent.md.tmp")
                tmp.write_text(content)
                os.replace(tmp, path)
            else:
                path.write_text(content)
            await _until_found(c, word)


async def test_an_agent_md_change_whose_event_was_lost_is_still_ingested(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A watcher that reports no change at all (a lost event): its tick compares each
    tenant's file with the version last read, so a FIFO replaced by a file, and a later
    edit, are ingested anyway."""
    import watchfiles

    async def blind(*_a: object, stop_event: asyncio.Event, **_k: object):
        for _ in range(100_000):  # a tick per 0.1 s, never a change
            if stop_event.is_set():
                return
            yield set()
            await asyncio.sleep(0.1)

    monkeypatch.setattr(watchfiles, "awatch", blind)
    root = short_tmpdir()
    path = root / "data" / "tenants" / "acme" / "agent.md"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    async with running_daemon(root, embeddings={"provider": "none"}) as d, d.client() as c:
        md = d.app.agent_md
        await until(lambda: md.watching is not None and md.unreadable >= 1)
        tmp = path.with_name("agent.md.tmp")
        tmp.write_text("# agent.md\n\n- The code word is zebraquux.\n")
        os.replace(tmp, path)
        await _until_found(c, "zebraquux")
        path.write_text("# agent.md\n\n- The code word is now okapiwombat.\n")
        await _until_found(c, "okapiwombat")
