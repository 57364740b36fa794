"""The user-memory and business-context behaviour tests run against both backends: the local
SQLite file, and a real PostgreSQL server as the shared store (``MEMMAN_STORAGE_SHARED``, read
by every daemon the test starts). A test that depends on one backend's internals says so with
``@pytest.mark.sqlite_only``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg_server import fresh_db, session_server

BOTH_BACKENDS = ("test_user_memory", "test_docs", "test_semantic")
#: tests that read the SQLite file's vector tables themselves (their PostgreSQL counterparts
#: are in tests/shared_store/test_vectors.py)
READS_THE_SQLITE_FILE = {
    "test_currency_finds_eur_with_no_key_and_no_network",
    "test_changed_model_reembeds_in_background_while_search_works",
    "test_model_change_by_config_reload_reembeds",
    "test_long_document_is_embedded_in_the_background",
    "test_minilm_graph_matches_the_reference_model",  # no daemon at all
    "test_a_damaged_int8_file_is_set_aside_and_made_again",  # no daemon at all
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: depends on the SQLite backend's internals")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_BACKENDS \
            and metafunc.definition.get_closest_marker("sqlite_only") is None \
            and metafunc.definition.name not in READS_THE_SQLITE_FILE:
        metafunc.parametrize("backend", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture(autouse=True)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The shared tiers' backend of every daemon this test starts (SQLite unless
    parametrized)."""
    param = getattr(request, "param", "sqlite")
    if param == "postgresql":
        monkeypatch.setenv("MEMMAN_STORAGE_SHARED", fresh_db(session_server()))
    else:
        monkeypatch.delenv("MEMMAN_STORAGE_SHARED", raising=False)
    yield param
