"""`memman --version`, `call`, `export`/`import`, `search`, `context`, `config`, completion,
and JSON errors under --json, against a daemon subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memman import __version__
from memman.sync_client import SyncClient
from tests.helpers import daemon_process, short_tmpdir


def memman(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memman_cli.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env, input=stdin)


def test_version() -> None:
    r = memman("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"memman {__version__}"


def test_call_export_import_search_context_and_json_errors() -> None:
    root = short_tmpdir()
    with daemon_process() as d:
        sock = str(d.socket)
        r = memman("--socket", sock, "call", "memman_get_api_info")
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert info["api_level"] >= 1 and any(m["name"] == "memman_ping" for m in info["methods"])
        # arguments as JSON; a bare word is a string; the memman_ prefix may be left out
        r = memman("--socket", sock, "call", "session_open", "cli-1", '{"user_id": "ana"}')
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["user_id"] == "ana"
        r = memman("--socket", sock, "call", "memman_session_add", '"cli-1"',
                   '{"role": "user", "content": "The deploy key rotates every 90 days."}')
        assert json.loads(r.stdout)["tokens"] > 0
        with SyncClient(d.socket) as mm:
            mm.memory_append("ana", "episodic", {"content": "Ana moved the deploy to Friday."})
        # export to a file, import it under another id
        out = root / "cli-1.json"
        r = memman("--socket", sock, "export", "cli-1", "-o", str(out))
        assert r.returncode == 0, r.stderr
        exported = json.loads(out.read_text())
        assert "90 days" in json.dumps(exported)
        r = memman("--socket", sock, "export", "cli-1")
        assert json.loads(r.stdout) == exported
        r = memman("--socket", sock, "--json", "import", str(out), "--as", "cli-2")
        assert r.returncode == 0, r.stdout + r.stderr
        with SyncClient(d.socket) as mm:
            assert mm.session_get("cli-2")["entries"][0]["content"].startswith("The deploy key")
        r = memman("--socket", sock, "search", "ana", "deploy Friday", "--json")
        assert r.returncode == 0, r.stderr
        assert "Friday" in json.dumps(json.loads(r.stdout))
        r = memman("--socket", sock, "search", "ana", "deploy Friday")
        assert "Friday" in r.stdout
        r = memman("--socket", sock, "context", "cli-1", "--max-tokens", "2000", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        ctx = json.loads(r.stdout)
        assert any("90 days" in (m.get("content") or "") for m in ctx["messages"])
        r = memman("--socket", sock, "context", "cli-1")
        assert "[user] The deploy key rotates every 90 days." in r.stdout
        r = memman("--socket", sock, "--json", "context", "cli-1", "--query", "how often does the key rotate?")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["query"] == "how often does the key rotate?"
        # every error under --json: JSON on stdout, non-zero exit
        for args in (["show", "nope"], ["call", "memman_session_get", "nope"],
                     ["call", "memman_no_such_method"], ["context", "nope"],
                     ["export", "nope"]):
            r = memman("--socket", sock, "--json", *args)
            assert r.returncode != 0, args
            err = json.loads(r.stdout)["error"]
            assert isinstance(err["code"], int) and err["message"], args
        r = memman("--socket", sock, "show", "nope", "--json")
        assert r.returncode == 1 and json.loads(r.stdout)["error"]["code"] == -32001
        r = memman("--socket", sock, "--json", "call", "memman_session_get", "42")
        assert json.loads(r.stdout)["error"]["code"] == -32602
        r = memman("--socket", sock, "--json", "import", str(root / "missing.json"))
        assert r.returncode == 2 and "missing.json" in json.loads(r.stdout)["error"]["message"]
        r = memman("--socket", sock, "--json", "frobnicate")
        assert r.returncode == 2 and "frobnicate" in json.loads(r.stdout)["error"]["message"]
    r = memman("--socket", str(root / "none.sock"), "--json", "sessions")
    assert r.returncode == 1 and "no memman daemon" in json.loads(r.stdout)["error"]["message"]


def test_config_prints_effective_values_and_their_sources() -> None:
    root = short_tmpdir()
    cfg = root / "config.toml"
    cfg.write_text("[context]\nmax_tokens = 4000\n")
    env = {**os.environ, "MEMMAN_LIMITS_MAX_CLIENTS": "64", "MEMMAN_CONFIG": str(cfg)}
    r = memman("--json", "config", env=env)
    assert r.returncode == 0, r.stderr
    rows = {v["key"]: v for v in json.loads(r.stdout)["values"]}
    assert rows["context.max_tokens"] == {"key": "context.max_tokens", "value": 4000,
                                          "source": str(cfg)}
    assert rows["limits.max_clients"]["source"] == "env MEMMAN_LIMITS_MAX_CLIENTS"
    assert rows["limits.max_clients"]["value"] == 64
    assert rows["cycle.max_exchanges"]["source"] == "default"
    r = memman("config", env=env)
    assert f"max_tokens = 4000  # {cfg}" in r.stdout
    cfg.write_text('[context]\nmax_tokens = "lots"\n')
    r = memman("--json", "config", env=env)
    assert r.returncode == 1 and "context.max_tokens" in json.loads(r.stdout)["error"]["message"]


def test_shell_completion_scripts() -> None:
    for shell in ("bash", "zsh", "fish"):
        r = memman("completion", shell)
        assert r.returncode == 0 and "memman" in r.stdout and "memman_session_get" in r.stdout
    script = memman("completion", "bash").stdout
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0

    def complete(*words: str) -> list[str]:
        line = " ".join(["memman", *words])
        prog = (script + f'\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _memman; '
                'printf "%s\\n" "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", prog], capture_output=True, text=True).stdout.split()

    assert "context" in complete("con") and "config" in complete("con")
    assert complete("call", "memman_session_ge") == ["memman_session_get"]
    assert "--max-tokens" in complete("context", "--max")
    assert complete("completion", "f") == ["fish"]


@pytest.mark.parametrize("name,text,said", [
    ("id of 2^70", '{"format": "memman.session/1", "entries": [{"id": ' + str(2**70) + "}]}",
     "data.entries[0].id is 1180591620717411303424, which does not fit 64 bits"),
    ("100k-deep nesting", "[" * 100_000 + "]" * 100_000, "nests arrays or maps too deeply"),
    ("200-deep nesting", '{"entries": ' + "[" * 200 + "]" * 200 + "}", "nested deeper than 64"),
])
def test_import_of_an_unsendable_file_is_one_line(name: str, text: str, said: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22: `memman import` prints one line and exits non-zero, never a traceback."""
    from memman_cli.cli import main
    from tests.helpers import short_tmpdir

    f = short_tmpdir() / "bad.json"
    f.write_text(text)
    assert main(["import", str(f), "--socket", str(f.parent / "none.sock")]) != 0
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
