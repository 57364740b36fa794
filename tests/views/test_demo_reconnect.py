"""The demo's agents reconnect after a daemon restart and go on with their sessions; a second run
on the same data goes on with them too, without a second system prompt."""

from __future__ import annotations

import asyncio

from memman import SyncClient, names
from memman_cli.demo import run_demo
from tests.helpers import daemon_process, short_tmpdir, wait_for_socket


async def test_demo_agents_reconnect_after_a_daemon_restart():
    root = short_tmpdir()
    with daemon_process(root) as d:
        socket = d.socket
        demo = asyncio.create_task(run_demo(str(socket), sessions=2, duration=120.0, rate=20.0,
                                            max_tokens=4000, quiet=True))
        for _ in range(400):  # the agents are running
            if not demo.done() and await asyncio.to_thread(cycles_at, socket) >= 2:
                break
            await asyncio.sleep(0.05)
        assert not demo.done()
        d.kill9()
    with daemon_process(root) as d2:  # the same data dir and socket
        wait_for_socket(d2.socket, d2.proc)
        before = await asyncio.to_thread(cycles_at, d2.socket)
        after = before
        for _ in range(600):  # bounded: until the agents have come back and worked
            after = await asyncio.to_thread(cycles_at, d2.socket)
            if after >= before + 4:
                break
            await asyncio.sleep(0.05)
        with SyncClient(d2.socket) as c:
            names_seen = {x["name"] for x in c.call(names.CLIENTS_LIST)["clients"]}
        demo.cancel()
        try:
            await demo
        except asyncio.CancelledError:
            pass
        assert {"memman-demo-0", "memman-demo-1"} <= names_seen  # both agents came back
        assert after >= before + 4, (before, after)


async def test_a_second_demo_run_on_the_same_data_keeps_one_system_prompt_a_session():
    """`make run` again on the same data dir: the demo's sessions are opened again and go
    on; their system prompt is not added a second time (it was, once per run: the window
    then sent it once per run)."""
    with daemon_process(short_tmpdir()) as d:
        for _ in range(2):
            await run_demo(str(d.socket), sessions=2, duration=0.5, rate=20.0, max_tokens=4000,
                           quiet=True)
        with SyncClient(d.socket) as c:
            listed = c.call(names.SESSION_LIST)
            assert len(listed) == 2
            for s in listed:
                entries = c.call(names.SESSION_GET, s["session_id"], {})["entries"]
                prompts = [e for e in entries if (e.get("content") or "").startswith("[SYSTEM:")]
                assert len(prompts) == 1, (s["session_id"], len(prompts))


def cycles_at(socket) -> int:
    with SyncClient(socket) as c:
        return sum(s.get("counters", {}).get("cycles", 0) for s in c.call(names.SESSION_LIST))
