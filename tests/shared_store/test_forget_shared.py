"""tests/test_forget.py again, every daemon on the shared store (a real PostgreSQL): forgetting
one record or document behaves the same, audited in the shared store."""

from __future__ import annotations

import pytest

from tests import test_forget as _same
from tests.pg_server import fresh_db, session_server


@pytest.fixture(autouse=True)
def shared_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMAN_STORAGE_SHARED", fresh_db(session_server()))


globals().update({k: v for k, v in vars(_same).items()
                  if k.startswith("test_") and ("memory" in k or "doc" in k or "forget" in k)})
