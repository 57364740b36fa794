"""The demo's agents reconnect after a daemon restart and go on with their sessions."""

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


def cycles_at(socket) -> int:
    with SyncClient(socket) as c:
        return sum(s.get("counters", {}).get("cycles", 0) for s in c.call(names.SESSION_LIST))
