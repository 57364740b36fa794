"""A ``Storage`` as ``backend_for`` makes it, on the local SQLite file and on a real
PostgreSQL server (a fresh database each test): every test of this package runs on both."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memman.config import Config
from memman_daemon.storage import Storage, backend_for
from memman_daemon.storage.sqlite.store import Store
from tests.helpers import short_tmpdir
from tests.pg_server import fresh_db, session_server


@pytest.fixture(params=["sqlite", "postgresql"])
async def storage(request: pytest.FixtureRequest) -> AsyncIterator[Storage]:
    root = short_tmpdir()
    shared = fresh_db(session_server()) if request.param == "postgresql" else ""
    config = Config.load("/nonexistent/config.toml", data_dir=root / "data",
                         overrides={"storage": {"shared": shared}})
    config.data_dir.mkdir(parents=True)
    local = Store(config.database_path)
    await local.open()
    s = backend_for(config, local)
    await s.store.load()
    for group in (s.docs, s.audit):
        await group.load()
    try:
        yield s
    finally:
        await s.store.close()
        await local.close()
