"""The one list of methods (memman.names.METHODS) matches the daemon, the typed client methods
are generated from it, and mypy finds a misspelled method."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from memman import names
from memman.client import Client
from memman.sync_client import SyncClient
from memman_daemon.api import load_all
from memman_daemon.rpc import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def _spec_params(spec: str) -> list[tuple[str, bool]]:
    import ast

    fn = ast.parse(f"def f({spec}): pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    n_req = len(fn.args.args) - len(fn.args.defaults)
    return [(a.arg, i < n_req) for i, a in enumerate(fn.args.args)]


def test_every_registered_method_has_a_matching_signature_in_the_list() -> None:
    load_all()
    specs = {m.name: m for m in names.METHODS}
    missing = sorted(set(REGISTRY.methods) - set(specs))
    assert not missing, f"add these to memman.names.METHODS and run scripts/gen_client_methods.py: {missing}"
    for name, method in REGISTRY.methods.items():
        spec = specs[name]
        assert _spec_params(spec.params) == [(p.name, p.required) for p in method.params], name
        assert spec.writes == method.writes, name
    assert not set(specs) - set(REGISTRY.methods), "listed methods the daemon does not have"


def test_generated_methods_are_current_and_typed() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_client_methods.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    import inspect

    sig = inspect.signature(Client.session_add)
    assert list(sig.parameters) == ["self", "session_id", "entry"]
    assert "typed entry" in (Client.session_add.__doc__ or "")
    assert list(inspect.signature(SyncClient.session_context).parameters) == ["self", "session_id", "opts"]


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
