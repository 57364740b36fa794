"""What a call to the shared store says when the store is not up and no error is known: a call
that reaches it while it closes (the daemon's shutdown: a request past the in-flight wait, a
background write) or before it first connects. It said "unavailable (None)"."""

from __future__ import annotations

import pytest

from memman import names
from memman.errors import SHARED_UNAVAILABLE, MemmanError
from memman_daemon.clock import FakeClock
from memman_daemon.storage.postgres.pool import PgStore, SharedUnavailable
from tests.helpers import running_daemon
from tests.pg_server import fresh_db, session_server

# nothing listens on port 1: no connection is ever made by these tests
DSN = "postgresql://memman@127.0.0.1:1/memman"


async def _answer(store: PgStore) -> str:
    with pytest.raises(SharedUnavailable) as ei:
        await store.run(lambda c: c.fetchval("SELECT 1"))
    return str(ei.value)


async def test_a_call_to_a_closed_shared_store_says_it_is_closed() -> None:
    store = PgStore(DSN)
    await store.close()
    said = await _answer(store)
    assert "unavailable (closed)" in said
    assert "None" not in said


async def test_a_call_before_the_first_connection_says_it_is_connecting() -> None:
    said = await _answer(PgStore(DSN))
    assert "unavailable (connecting)" in said
    assert "None" not in said


async def test_a_request_reaching_the_closed_shared_store_says_it_is_closed() -> None:
    # the store was up (no error known), then closed as the shutdown closes it while a
    # request is still served
    storage = {"shared": fresh_db(session_server())}
    async with running_daemon(clock=FakeClock(), storage=storage) as d, d.client() as c:
        await c.call(names.MEMORY_LEARN, "ana", "k", "v")
        await d.app.shared.close()
        with pytest.raises(MemmanError) as ei:
            await c.call(names.MEMORY_LEARN, "ana", "k", "w")
    assert ei.value.code == SHARED_UNAVAILABLE
    assert "unavailable (closed)" in str(ei.value)
    assert "None" not in str(ei.value)
