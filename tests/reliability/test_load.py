"""Load: 500 concurrent clients doing mixed work; the LLM endpoint failing during load; SIGTERM
during load. Bounded by counts (with generous time guards), never by expected speed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import socket
import sqlite3
from pathlib import Path

import pytest

from memman.client import Client
from memman.errors import ConnectionLost, MemmanError
from memman.sync_client import SyncClient
from tests.helpers import daemon_process, make_config, running_daemon, short_tmpdir
from tests.llm_server import LLMServer

GUARD = 120.0
CLIENTS = 500
SESSIONS = 100
OPS_PER_CLIENT = 30
SUBSCRIBERS = 100  # one per session
RSS_BOUND_MB = 512  # the daemon's resident memory stays under this during the whole run


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def test_500_concurrent_clients_mixed_work() -> None:
    with daemon_process() as d:
        with SyncClient(d.socket) as admin:
            methods = {m["name"] for m in admin.call("memman_get_api_info")["methods"]}
            for s in range(SESSIONS):
                admin.call("memman_session_open", f"s{s}", {"user_id": f"u{s % 7}"})
        has_cache = {"memman_cache_put", "memman_cache_lookup"} <= methods
        rss = [rss_mb(d.proc.pid)]
        stop_sampling = asyncio.Event()

        async def sample() -> None:
            while not stop_sampling.is_set():
                rss.append(rss_mb(d.proc.pid))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_sampling.wait(), 0.1)

        sampler = asyncio.create_task(sample())
        clients = await asyncio.gather(*(Client.connect(d.socket, name=f"c{i}", timeout=GUARD)
                                         for i in range(CLIENTS)))
        events: dict[int, list[dict]] = {i: [] for i in range(SUBSCRIBERS)}
        for i in range(SUBSCRIBERS):
            await clients[i].subscribe(["session"], {"session_id": f"s{i}"},
                                       lambda name, p, i=i: events[i].append(p))
        acked: list[tuple[str, str]] = []
        errors: list[BaseException] = []
        counts = {"reads": 0, "writes": 0, "cache": 0}

        async def work(i: int, c: Client) -> None:
            rng = random.Random(i)
            sid = f"s{rng.randrange(SESSIONS)}"
            try:
                for n in range(OPS_PER_CLIENT):
                    op = rng.choice(["add", "add", "get", "list", "stats", "tokens", "cache"])
                    if op == "add":
                        content = f"c{i}-{n} " + "word " * rng.randrange(1, 40)
                        r = await c.session_add(sid, {"role": rng.choice(["user", "assistant"]),
                                                      "content": content})
                        assert r["id"] > 0 and r["tokens"] > 0
                        acked.append((sid, content))
                        counts["writes"] += 1
                    elif op == "get":
                        r = await c.session_get(sid, {"limit": 5})
                        assert r["session_id"] == sid
                        counts["reads"] += 1
                    elif op == "list":
                        assert len(await c.session_list({})) == SESSIONS
                        counts["reads"] += 1
                    elif op == "stats":
                        assert (await c.stats())["clients"] >= 1
                        counts["reads"] += 1
                    elif op == "tokens":
                        r = await c.count_tokens([{"role": "user", "content": "hello"}], "gpt-4o")
                        assert r["tokens"] > 0
                        counts["reads"] += 1
                    elif has_cache:
                        params = {"q": f"{i % 10}"}
                        await c.cache_put(sid, "search", params, {"hits": [i]}, {"duration": 3})
                        assert await c.cache_lookup(sid, "search", params) is not None
                        counts["cache"] += 1
                    else:
                        assert await c.ping() == "pong"
            except BaseException as exc:  # noqa: BLE001 - collected and reported below
                errors.append(exc)

        await asyncio.wait_for(asyncio.gather(*(work(i, c) for i, c in enumerate(clients))), GUARD)
        assert not errors, f"{len(errors)} errors, e.g. {errors[:3]!r}"
        # every subscriber saw every add to its session, in order, with no gap
        per_session: dict[str, int] = {}
        for sid, _ in acked:
            per_session[sid] = per_session.get(sid, 0) + 1
        for _ in range(int(GUARD / 0.05)):
            if all(sum(p["kind"] == "entry_added" for p in events[i]) >= per_session.get(f"s{i}", 0)
                   for i in range(SUBSCRIBERS)):
                break
            await asyncio.sleep(0.05)
        for i in range(SUBSCRIBERS):
            got = [p for p in events[i] if p["kind"] == "entry_added"]
            assert len(got) == per_session.get(f"s{i}", 0), f"subscriber {i}"
            assert [p["seq"] for p in events[i]] == list(range(1, len(events[i]) + 1))
        await asyncio.gather(*(c.close() for c in clients))
        stop_sampling.set()
        await sampler
        # no lost writes: every acknowledged entry is there
        with SyncClient(d.socket) as admin:
            for s in range(SESSIONS):
                present = {e["content"] for e in
                           admin.call("memman_session_get", f"s{s}", {})["entries"]}
                lost = [c for sid, c in acked if sid == f"s{s}" and c not in present]
                assert not lost, f"s{s}: {len(lost)} acknowledged entries missing"
            st = admin.call("memman_stats")
        assert st["errors"] == 0
        assert counts["writes"] > 0 and counts["reads"] > 0 and (counts["cache"] > 0 or not has_cache)
        assert max(rss) < RSS_BOUND_MB, f"daemon RSS peaked at {max(rss):.0f} MiB"
        print(f"\n500 clients: {counts}, daemon RSS {rss[0]:.0f} -> peak {max(rss):.0f} MiB")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


FILLER = "ordinary chatter about the weather and the plan for the day, nothing special"


@pytest.mark.parametrize("mode", ["down", "hang", "malformed", "500"])
async def test_llm_endpoint_failing_during_load(mode: str, monkeypatch) -> None:
    """Fallback summaries, and no request waits for the LLM: in "hang" mode the endpoint never
    answers (its hang outlives the test and the client timeout is longer than any guard), so
    every request that returns returned without it."""
    monkeypatch.setenv("MEMMAN_TEST_LLM_KEY", "sk-test")
    with LLMServer(mode="good" if mode == "down" else mode, hang_s=3600) as srv:
        cfg = make_config(short_tmpdir("mmllm"), context={"llm_deadline_s": 0.2},
                          cycle={"llm_deadline_s": 0.2})
        cfg.llm.api_key_env = "MEMMAN_TEST_LLM_KEY"
        cfg.llm.base_url = (f"http://127.0.0.1:{_closed_port()}/v1" if mode == "down"
                            else srv.base_url)
        cfg.llm.timeout_s = 3600 if mode == "hang" else 10
        async with running_daemon(config=cfg) as d:
            async def agent(i: int) -> list[dict]:
                results = []
                async with d.client(f"agent{i}") as c:
                    sid = f"a{i}"
                    await c.session_open(sid, {"max_tokens": 600})
                    for r in range(6):
                        for k in range(6):
                            await c.session_add(sid, {"role": "user" if k % 2 else "assistant",
                                                      "content": f"{FILLER} {r}.{k}"})
                        results.append(await c.session_context(sid, {}))
                        fin = await c.session_finalize(sid, f"question {r}?", "answer " * 150)
                        assert fin["exchange"]["summarized"] is True
                return results

            all_results = await asyncio.wait_for(
                asyncio.gather(*(agent(i) for i in range(20))), GUARD)
            sources = {g.get("source") for rs in all_results for r in rs for g in r["gaps"]}
            assert "llm" not in sources  # the window never asks the LLM (finalize does)
            assert sources <= {"none", "lines"}, sources
            async with d.client() as c:
                st = (await c.stats())["summarizer"]
                assert await c.ping() == "pong"
            assert st["fallbacks"] > 0
            assert st["ok"] == 0
            if mode == "hang":
                assert st["deadline_missed"] > 0
            elif mode != "down":
                assert srv.chat_requests(), "the LLM endpoint was never called"


async def test_sigterm_during_load_commits_every_acknowledged_write() -> None:
    root = short_tmpdir("mmstl")
    acked: list[tuple[str, str]] = []
    try:
        with daemon_process(root) as d:
            with SyncClient(d.socket) as admin:
                for s in range(10):
                    admin.call("memman_session_open", f"t{s}", {})
            enough = asyncio.Event()

            async def writer(w: int) -> None:
                c = await Client.connect(d.socket, name=f"w{w}")
                try:
                    for i in range(10**9):
                        content = f"w{w}-{i}"
                        try:
                            await c.session_add(f"t{w % 10}", {"role": "user", "content": content})
                        except (ConnectionLost, MemmanError):
                            return
                        acked.append((f"t{w % 10}", content))
                        if len(acked) >= 2000:
                            enough.set()
                finally:
                    await c.close()

            tasks = [asyncio.create_task(writer(w)) for w in range(50)]
            await asyncio.wait_for(enough.wait(), GUARD)
            d.proc.send_signal(15)
            await asyncio.wait_for(asyncio.gather(*tasks), GUARD)
            assert await asyncio.to_thread(d.proc.wait, GUARD) == 0
            assert not d.socket.exists()
        with contextlib.closing(sqlite3.connect(root / "data" / "memman.db")) as conn:
            assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
            stored = {(sid, json.loads(data)["content"])
                      for sid, data in conn.execute("SELECT session_id, data FROM entries")}
        missing = [a for a in acked if a not in stored]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged writes not committed"
    finally:
        shutil.rmtree(root, ignore_errors=True)

