"""Each method is declared once (memman.api.METHODS): the daemon binds exactly one handler to
each declaration and refuses a handler that differs from it; the typed client methods, the
protocol table, memman_get_api_info and the clients' read-only list are derived from it; mypy
finds a misspelled method."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memman import api, names
from memman.client import Client
from memman.errors import INVALID_PARAMS, MemmanError
from memman.params import Int, Map, Param, Str
from memman.reconnect import READ_ONLY
from memman.sync_client import SyncClient
from memman_daemon.api import load_all
from memman_daemon.rpc import REGISTRY, Call, Registry
from tests.helpers import running_daemon

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gen_client_methods",
                                                  ROOT / "scripts" / "gen_client_methods.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_declared_method_has_exactly_one_handler_and_every_handler_a_declaration() -> None:
    load_all()
    assert set(REGISTRY.methods) == set(api.BY_NAME)
    handlers = {}
    for name, m in REGISTRY.methods.items():
        assert m.decl is api.BY_NAME[name]
        got = list(inspect.signature(m.handler).parameters)
        assert got == ["call", *[p.name for p in m.params]], name
        assert not m.handler.__doc__, f"{name}: the doc belongs to the declaration"
        handlers.setdefault(m.handler, []).append(name)
    assert all(len(v) == 1 for v in handlers.values()), handlers
    assert REGISTRY.methods[names.SESSION_IMPORT].offload
    assert REGISTRY.methods[names.SESSION_ADD].writes and not REGISTRY.methods[names.PING].writes


def test_a_handler_that_differs_from_its_declaration_is_refused_at_registration() -> None:
    reg = Registry()

    def refused(name: str, fn, why: str) -> None:
        with pytest.raises(RuntimeError, match=why):
            reg.handles(name)(fn)

    async def wrong_names(call: Call, session_id: str, pinned: bool, entry_id: int) -> None:
        pass

    async def a_default(call: Call, session_id: str, entry_id: int, pinned: bool = True) -> None:
        pass

    async def documented(call: Call, session_id: str, entry_id: int, pinned: bool) -> None:
        """A second doc."""

    async def no_call(session_id: str, entry_id: int, pinned: bool) -> None:
        pass

    async def right(call: Call, session_id: str, entry_id: int, pinned: bool) -> None:
        pass

    refused(names.SESSION_PIN, wrong_names, r"takes \(session_id, pinned, entry_id\) but the "
            r"declaration has \(session_id, entry_id, pinned\)")
    refused(names.SESSION_PIN, a_default, "defaults belong to the declaration")
    refused(names.SESSION_PIN, documented, "the doc belongs to the declaration")
    refused(names.SESSION_PIN, no_call, "first parameter must be `call`")
    refused("memman_not_declared", right, "does not declare")
    assert reg.handles(names.SESSION_PIN)(right) is right
    refused(names.SESSION_PIN, right, "has two handlers")
    with pytest.raises(RuntimeError, match="without a handler") as err:
        reg.check_complete()
    assert names.SESSION_ADD in str(err.value) and names.SESSION_PIN not in str(err.value)


def test_a_new_method_is_one_declaration_plus_its_handler() -> None:
    """A declaration and a handler are all it takes: parameters checked (-32602 naming the
    path, defaults filled in), doc and signature derived."""
    decl = api.Method("memman_demo_repeat", (
        Param("text", Str(min_len=1)),
        Param("opts", Map({"times": Int(1, 10)}), default=dict)),
        "str", "Repeat the text.\n\nMore detail.")
    reg = Registry(declared={**api.BY_NAME, decl.name: decl})

    @reg.handles(decl.name)
    def repeat(call: Call, text: str, opts: dict) -> str:
        return text * opts.get("times", 1)

    m = reg.lookup(decl.name)
    assert m.handler(None, **m.bind(["ab", {"times": 3}])) == "ababab"
    assert m.bind(["ab"]) == {"text": "ab", "opts": {}}
    with pytest.raises(MemmanError) as err:
        m.bind(["ab", {"times": 11}])
    assert err.value.code == INVALID_PARAMS and "'opts.times'" in err.value.message
    assert decl.signature() == "text: str, opts: dict = {}"
    assert decl.info()["doc"] == "Repeat the text." and not decl.writes


def test_signatures_are_derived_from_the_specs() -> None:
    by = api.BY_NAME
    assert by[names.SESSION_GET].signature() == "session_id: str, opts: dict = {}"
    assert by[names.COUNT_TOKENS].signature() == (
        "messages: list, model: str | dict = 'gpt-4o-mini', tools: list | dict = []")
    assert by[names.SCRATCHPAD_READ].signature() == "session_id: str, ids: list | None = None"
    assert by[names.MEMORY_CLEAR].signature() == "user_id: str, type: str = ''"
    assert by[names.DOCS_REMOVE].signature() == "tenant_id: str, ref: str | int"
    assert READ_ONLY == {m.name for m in api.METHODS if not m.writes}
    assert names.SESSION_GET in READ_ONLY and names.SESSION_PIN not in READ_ONLY


def test_generated_methods_and_protocol_table_are_current_and_typed() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_client_methods.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    sig = inspect.signature(Client.session_add)
    assert list(sig.parameters) == ["self", "session_id", "entry"]
    assert "typed entry" in (Client.session_add.__doc__ or "")
    assert list(inspect.signature(SyncClient.session_context).parameters) == ["self", "session_id", "opts"]
    assert "entry_id: int" in inspect.getsource(Client.session_pin)
    # the table holds a row per declared method; an edited (or stale) table is not current
    gen = _script()
    doc = (ROOT / "docs" / "protocol.md").read_text()
    table = doc.split(gen.BEGIN, 1)[1].split(gen.END, 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `memman_")]
    assert sorted(r.split("`")[1] for r in rows) == sorted(api.BY_NAME)
    assert ("| `memman_session_pin` | `session_id: str, entry_id: int, pinned: bool = true` | "
            "`Pinned` | yes |") in table
    stale = doc.replace(rows[0], rows[0].replace("|  |", "| yes |"))
    assert gen.render_protocol(stale) == doc != stale


async def test_api_info_answers_from_the_declarations() -> None:
    async with running_daemon() as d, d.client() as c:
        info = await c.get_api_info()
    assert info["methods"] == [m.info() for m in sorted(api.METHODS, key=lambda m: m.name)]
    pin = next(m for m in info["methods"] if m["name"] == names.SESSION_PIN)
    assert pin == {"name": names.SESSION_PIN, "params": ["session_id", "entry_id", "pinned"],
                   "writes": True, "signature": "session_id: str, entry_id: int, pinned: bool = True",
                   "returns": "Pinned",
                   "doc": "Pin (or unpin) an entry: pinned entries always stay in the context."}


def test_mypy_flags_a_misspelled_method_and_a_wrong_argument(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(textwrap.dedent("""
        from memman.sync_client import SyncClient

        def run(mm: SyncClient) -> None:
            mm.session_open("s1")
            mm.session_ad("s1", {"role": "user", "content": "hi"})
            mm.session_pin("s1", "not-an-int")
            mm.call("memman_some_newer_method", 1)
    """))
    pkg = tmp_path / "memman"
    pkg.symlink_to(ROOT / "shared")
    r = subprocess.run([sys.executable, "-m", "mypy", "agent.py", "--ignore-missing-imports",
                        "--follow-imports=silent", "--no-incremental"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={"MYPYPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    out = r.stdout
    assert '"SyncClient" has no attribute "session_ad"' in out, out
    assert 'incompatible type "str"; expected "int"' in out, out
    assert "memman_some_newer_method" not in out and out.count("error:") == 2, out
