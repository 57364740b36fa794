"""Engine test fixtures: a real daemon (real socket, real SQLite) and the loopback LLM server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memman.config import Config
from memman.sync_client import SyncClient
from tests.helpers import make_config, running_daemon, short_tmpdir
from tests.llm_server import LLMServer


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    with LLMServer() as srv:
        yield srv


def llm_config(srv: LLMServer, timeout_s: float = 2.0, **sections: Any) -> Config:
    """A test Config whose summarizer points at the loopback server (key: MEMMAN_TEST_LLM_KEY)."""
    cfg = make_config(short_tmpdir(), **sections)
    cfg.llm.base_url = srv.base_url
    cfg.llm.timeout_s = timeout_s
    cfg.llm.api_key_env = "MEMMAN_TEST_LLM_KEY"
    return cfg


@pytest.fixture
def llm_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MEMMAN_TEST_LLM_KEY", "sk-test")
    return "sk-test"


class ThreadDaemon:
    """A daemon running in its own event loop thread, for sync (hypothesis) tests."""

    def __init__(self, **sections: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop: asyncio.Event | None = None
        self.sections = sections
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "daemon did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self.stop = asyncio.Event()
        async with running_daemon(short_tmpdir(), **self.sections) as d:
            self.d = d
            self.ready.set()
            await self.stop.wait()

    def client(self) -> SyncClient:
        return SyncClient(self.d.socket, name="prop")

    def close(self) -> None:
        assert self.stop is not None
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


@pytest.fixture(scope="module")
def thread_daemon() -> Iterator[ThreadDaemon]:
    td = ThreadDaemon(compression={"auto_compress": False})
    try:
        yield td
    finally:
        with contextlib.suppress(Exception):
            td.close()
