"""Clients survive a daemon restart: kill -9, start again, the next call succeeds, events flow
again on the same subscription id, and the possible loss is reported as a gap."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from memman.client import Client
from memman.errors import (
    Busy,
    ConnectionLost,
    InvalidParams,
    MemmanError,
    MethodNotFound,
    SessionNotFound,
)
from memman.reconnect import EventGap, RetryPolicy
from memman.sync_client import SyncClient
from tests.helpers import daemon_process, running_daemon, short_tmpdir

GUARD = 60  # seconds: a bound for waits on conditions, never an assertion on speed
PATIENT = RetryPolicy(attempts=40, initial_delay_s=0.05, max_delay_s=0.5)


async def _wait_for(pred, what: str) -> None:
    async def loop() -> None:
        while not pred():
            await asyncio.sleep(0.02)
    try:
        await asyncio.wait_for(loop(), GUARD)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_async_client_survives_a_restart_mid_loop_and_gets_its_events_again() -> None:
    root = short_tmpdir()
    events: list[tuple[str, dict[str, Any]]] = []
    gaps: list[EventGap] = []
    with daemon_process(root) as d:
        c = await Client.connect(d.socket, name="looper", retry=PATIENT, on_gap=gaps.append)
        sub = await c.subscribe(["session"], {"session_id": "s1"},
                                callback=lambda name, ev: events.append((name, ev)))
        await c.session_open("s1")
        for i in range(3):
            await c.session_add("s1", {"role": "user", "content": f"before {i}"})
        await _wait_for(lambda: sum(e["kind"] == "entry_added" for _, e in events) == 3,
                        "3 events before the restart")
        d.kill9()
        # the loop goes on: a read while the daemon is down fails only after the retries...
    with daemon_process(root) as d2:
        # ...and with the daemon back, the next call reconnects and succeeds
        got = await c.session_get("s1")
        assert [e["content"] for e in got["entries"]] == ["before 0", "before 1", "before 2"]
        assert c.reconnects == 1
        assert gaps and gaps[-1].reason == "reconnected" and gaps[-1].subscription == sub
        assert gaps[-1].last_seq == events[-1][1]["seq"] and gaps[-1].missed is None
        n_before = len(events)
        await c.session_add("s1", {"role": "user", "content": "after"})
        await _wait_for(lambda: len(events) > n_before, "an event after the restart")
        name, ev = events[-1]
        assert name == "memman_session_event" and ev["subscription"] == sub
        assert ev["seq"] == 1 and ev["kind"] == "entry_added"
        await c.close()
        assert d2.proc.poll() is None


def test_sync_client_survives_a_restart_mid_loop_and_gets_its_events_again() -> None:
    root = short_tmpdir()
    with daemon_process(root) as d:
        mm = SyncClient(d.socket, name="sync-looper", retry=PATIENT)
        sub = mm.subscribe(["session"])
        mm.session_open("s2")
        mm.session_add("s2", {"role": "user", "content": "one"})
        kinds = []
        while (ev := mm.next_event(timeout=GUARD)) is not None and ev[1].get("kind") != "entry_added":
            kinds.append(ev[1].get("kind"))
        d.kill9()
    with daemon_process(root) as d2:
        assert mm.session_get("s2")["entries"][0]["content"] == "one"
        assert mm.reconnects == 1 and mm.gaps[-1].reason == "reconnected"
        mm.session_add("s2", {"role": "user", "content": "two"})
        ev = mm.next_event(timeout=GUARD)
        assert ev is not None and ev[1]["subscription"] == sub and ev[1]["seq"] == 1
        mm.close()
        assert d2.proc.poll() is None


async def test_retry_off_raises_connection_lost_with_its_own_code() -> None:
    root = short_tmpdir()
    with daemon_process(root) as d:
        c = await Client.connect(d.socket, retry=False)
        await c.ping()
        d.kill9()
    with daemon_process(root):
        with pytest.raises(ConnectionLost) as err:
            await c.ping()
        assert err.value.code == -32099 and isinstance(err.value, MemmanError)
        await c.close()


async def test_a_write_lost_in_flight_is_not_sent_twice() -> None:
    """A write whose connection drops before the answer raises (its outcome is unknown)."""
    async with running_daemon() as d:
        c = await Client.connect(d.socket, retry=PATIENT)
        await c.session_open("w")
        conn = c._conn
        assert conn is not None
        conn.writer.transport.abort()  # the connection is gone, the daemon is fine
        await c.wait_closed()
        # not in flight (the connection was already down): reconnects and succeeds
        assert (await c.session_add("w", {"role": "user", "content": "x"}))["id"]
        assert c.reconnects == 1
        await c.close()


async def test_a_call_while_the_daemon_stops_and_restarts_waits_for_the_next_daemon() -> None:
    """Stopped (SIGTERM) and started again in the background: the call is sent to the new one."""
    root = short_tmpdir()
    with daemon_process(root) as d:
        c = await Client.connect(d.socket, retry=PATIENT)
        await c.session_open("b")
        d.terminate()
    done = threading.Event()

    def restart() -> None:
        with daemon_process(root):
            done.wait(GUARD)

    t = threading.Thread(target=restart)
    t.start()
    try:
        got = await c.session_get("b")
        assert got["session_id"] == "b"
    finally:
        done.set()
        t.join(GUARD)
        await c.close()


async def test_one_exception_class_per_error_family() -> None:
    async with running_daemon() as d, d.client() as c:
        with pytest.raises(SessionNotFound) as nf:
            await c.session_get("nope")
        assert nf.value.code == -32001 and "nope" in nf.value.message
        with pytest.raises(InvalidParams) as ip:
            await c.call("memman_session_get", 42)
        assert ip.value.code == -32602 and "session_id" in ip.value.message
        with pytest.raises(MethodNotFound):
            await c.call("memman_no_such_thing")
        # a method newer than this client is still reachable by name
        assert await c.call("memman_ping") == "pong"
        assert await c.ping() == "pong"
        # a connection that asked for Neovim-style errors still gets the right class and code
        nv = await Client.connect(d.socket, info={"errors": "nvim"})
        with pytest.raises(SessionNotFound) as nf2:
            await nv.session_get("nope")
        assert nf2.value.code == -32001 and nf2.value.message == "session 'nope' not found"
        with pytest.raises(InvalidParams):
            await nv.set_client_info("x", {"errors": "vim"})
        await nv.close()
    assert issubclass(Busy, MemmanError) and Busy("x").code == -32007
    assert ConnectionLost().code == -32099
    assert isinstance(MemmanError.from_wire([0, "[-32001] session 'x' not found"]), SessionNotFound)


def test_a_jump_in_seq_is_reported_with_the_number_missed() -> None:
    from memman.reconnect import Subscriptions

    gaps: list[EventGap] = []
    subs = Subscriptions(on_gap=gaps.append)
    s = subs.add(7, ["session"], {}, None)
    for seq in (1, 2, 5):
        ev = {"subscription": 7, "seq": seq}
        assert subs.event(ev) is s and ev["subscription"] == s.id
    assert gaps == [EventGap(s.id, "seq", 2, 5, 2)]


async def test_a_busy_answer_is_retried_and_retry_off_raises_busy() -> None:
    """The daemon answers -32007 while it is stopping; the call goes again when it takes work."""
    async with running_daemon() as d:
        patient = await Client.connect(d.socket, retry=PATIENT)
        impatient = await Client.connect(d.socket, retry=False)
        await patient.session_open("busy")
        errors_before = d.server.state.errors
        d.server.stopping = True  # the state a SIGTERM puts it in: new requests get -32007
        try:
            with pytest.raises(Busy) as err:
                await impatient.session_get("busy")
            assert err.value.code == -32007 and "retry" in err.value.message
            task = asyncio.create_task(patient.session_get("busy"))
            await _wait_for(lambda: d.server.state.errors >= errors_before + 2,
                            "the patient client's first -32007")
            assert not task.done()
        finally:
            d.server.stopping = False
        assert (await asyncio.wait_for(task, GUARD))["session_id"] == "busy"
        await patient.close()
        await impatient.close()


def test_an_event_before_the_subscribe_answer_is_read_is_kept_for_its_subscription() -> None:
    from memman.reconnect import Subscriptions

    subs = Subscriptions()
    early = {"subscription": 9, "seq": 1, "kind": "entry_added"}
    assert subs.event(early, "memman_session_event") is None  # not known yet: kept
    s = subs.add(9, ["session"], {}, None)
    assert subs.early_events(s) == [("memman_session_event", early)]
    assert early["subscription"] == s.id and s.last_seq == 1 and subs.gaps == []
    assert subs.early_events(s) == []
