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


def test_cli_edges_and_words() -> None:
    """Issue #24, items 6 and 7: what each command prints, in the user's words."""
    root = short_tmpdir()
    with daemon_process() as d:
        sock = str(d.socket)
        with SyncClient(d.socket) as mm:
            mm.session_open("w-1", {"user_id": "ana"})
            mm.scratchpad_write("w-1", "the staging db listens on port 6543")
            mm.memory_learn("ana", "editor", "helix")
        r = memman("--socket", sock, "search", "ana", "staging port", "--type", "working")
        assert r.returncode == 0 and "port 6543" in r.stdout, r.stdout + r.stderr
        r = memman("--socket", sock, "search", "ana", "editor helix", "--type", "semantic")
        assert "editor: helix" in r.stdout, r.stdout
        # a truncated map is refused as JSON, with the parse error
        r = memman("--socket", sock, "call", "session_add", "w-1", '{"role": "user"')
        assert r.returncode == 2 and "ARG 2 is not valid JSON" in r.stderr, r.stderr
        assert "expected a map" not in r.stderr
        r = memman("--socket", sock, "--json", "call", "session_add", "w-1", '{"role": "user"')
        assert json.loads(r.stdout)["error"]["code"] == -32602
        # import over an existing session names the flags
        out = root / "w.json"
        assert memman("--socket", sock, "export", "w-1", "-o", str(out)).returncode == 0
        r = memman("--socket", sock, "import", str(out))
        assert r.returncode != 0 and "--replace" in r.stderr and "--as" in r.stderr, r.stderr
        assert "opts.replace" not in r.stderr
        # completion completes session ids
        r = memman("--socket", sock, "sessions", "--ids")
        assert r.stdout.split() == ["w-1"]
        for shell in ("bash", "zsh", "fish"):
            script = memman("completion", shell).stdout
            assert "memman sessions --ids" in script
        # status: the summarizer's fallback, in words
        r = memman("--socket", sock, "status")
        assert "extractive fallback" in r.stdout and "no API key" in r.stdout, r.stdout
        r = memman("--socket", sock, "show", "w-1")
        assert "memman_session_expand" not in r.stdout
    r = memman("--socket", str(root / "none.sock"), "--json", "status")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 1 and isinstance(err, dict) and err["code"] == -32099 and err["message"]


def test_setup_check_and_mcp_config() -> None:
    r = memman("setup", "--check")
    assert r.returncode == 0 and "installed" in r.stdout
    r = memman("mcp", "config", "claude-desktop", "--user", "ana")
    entry = json.loads(r.stdout)["mcpServers"]["memman"]
    assert os.path.isabs(entry["command"]) and "ana" in entry["args"]
    assert entry["args"][-3:] == ["mcp", "--user", "ana"] or "mcp" in entry["args"]
    r = memman("mcp", "config", "claude-code")
    assert r.stdout.startswith("claude mcp add memman -- /")


def test_status_says_when_the_search_model_is_missing(monkeypatch, capsys) -> None:
    """The daemon reports embeddings.search_model_installed; `memman status` says what is
    missing, what it costs and the command that fixes it."""
    from memman_cli import cli

    stats = {"version": "0", "pid": 1, "uptime_s": 1, "socket": "s", "database": "d",
             "database_bytes": 0, "store": {"synchronous": "FULL"}, "clients": 1, "requests": 1,
             "errors": 0, "sessions": 0, "entries": 0, "tokenizer": {"encoding": "o200k_base"},
             "summarizer": {"model": "gpt-4o-mini", "available": True, "enabled": True},
             "embeddings": {"enabled": True, "provider": "local",
                            "model_id": "wordllama/l2_supercat@256",
                            "search_model_installed": False}}

    class Fake:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def stats(self):
            return stats

    monkeypatch.setattr(cli, "_client", lambda args: Fake())
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "all-MiniLM-L6-v2 is not installed" in out and "static vectors" in out
    assert "memman setup" in out and "summarizer gpt-4o-mini\n" in out
    stats["embeddings"]["search_model_installed"] = True
    stats["summarizer"] = {"model": "gpt-4o-mini", "available": False, "enabled": False}
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "not installed" not in out and "[llm] enabled = false" in out


def test_recall_label_shows_the_embedding_backlog_draining() -> None:
    from memman_cli.cli import recall_label
    busy = recall_label({"scope": "user", "corpora": 2, "entries": 1200,
                         "pending_vectors": 600, "drain_per_s": 300.0})
    assert "600 vectors pending, embedding 300/s, ~2s left" in busy
    assert "every vector embedded" in recall_label({"scope": "user", "corpora": 1, "entries": 3})
    assert recall_label({"scope": "off"}).startswith("off")


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
