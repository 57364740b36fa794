"""Config that refuses what it cannot use: at start (the daemon stops, naming key, value and
expectation), on reload (the old values stay), and an unknown MEMMAN_* name is a warning
naming the closest known one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memman.config import Config, ConfigError
from tests.helpers import daemon_env, running_daemon, short_tmpdir


def _start_daemon(root, env_extra: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    env = {**daemon_env(root), **env_extra}
    return subprocess.run([sys.executable, "-m", "memman_daemon", "--socket", str(root / "s" / "m.sock"),
                           "--data-dir", str(root / "data"), *flags],
                          capture_output=True, text=True, timeout=60, env=env)


def test_a_wrong_typed_value_in_config_toml_stops_the_daemon_naming_the_key() -> None:
    root = short_tmpdir()
    cfg = root / "config.toml"
    cfg.write_text('[context]\nmax_tokens = "lots"\n')
    r = _start_daemon(root, {"MEMMAN_CONFIG": str(cfg)})
    assert r.returncode == 1
    assert "context.max_tokens = 'lots'" in r.stderr and "expected an integer" in r.stderr
    assert str(cfg) in r.stderr
    assert not (root / "s" / "m.sock").exists()


def test_a_wrong_env_value_stops_the_daemon_naming_the_variable() -> None:
    root = short_tmpdir()
    r = _start_daemon(root, {"MEMMAN_CONTEXT_WARN_THRESHOLD": "high"})
    assert r.returncode == 1
    assert "MEMMAN_CONTEXT_WARN_THRESHOLD" in r.stderr and "'high'" in r.stderr
    assert "context.warn_threshold" in r.stderr and "a number" in r.stderr


def test_log_level_bogus_is_refused() -> None:
    root = short_tmpdir()
    r = _start_daemon(root, {}, "--log-level", "bogus")
    assert r.returncode == 2 and "--log-level" in r.stderr and "BOGUS" in r.stderr


@pytest.mark.parametrize(("toml", "named", "expected"), [
    ('[context]\nwarn_threshold = 1.5\n', "context.warn_threshold = 1.5", "from 0.0 to 1.0"),
    ('[limits]\nmax_clients = 0\n', "limits.max_clients = 0", "at least 1"),
    ('[limits]\nmax_clients = 2.5\n', "limits.max_clients = 2.5", "an integer"),
    ('[llm]\nenabled = "yes"\n', "llm.enabled = 'yes'", "a boolean"),
    ('[scoring]\nimportant_keywords = "error"\n', "scoring.important_keywords", "a list of strings"),
    ('[scoring]\nrole_scores = {user = "high"}\n', "scoring.role_scores", "a table of numbers"),
    ('[storage]\nsynchronous = "SOMETIMES"\n', "storage.synchronous = 'SOMETIMES'", "NORMAL, FULL"),
    ('[scoring]\nprofile = "seed001"\n', "scoring.profile = 'seed001'", "salience, keyword"),
    ('[embeddings]\nmodel = "bert-large"\n', "embeddings.model = 'bert-large'",
     "all-MiniLM-L6-v2, l2_supercat"),
    ('[cache]\ndefault_ttl_s = -1.0\n', "cache.default_ttl_s = -1.0", "0 or more"),
    ('[context]\nwarn_threshold = 0.9\nprune_threshold = 0.8\n', "warn_threshold", "must rise"),
])
def test_out_of_range_and_wrong_types_are_refused(toml: str, named: str, expected: str) -> None:
    root = short_tmpdir()
    cfg = root / "config.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError) as err:
        Config.load(cfg)
    assert named in str(err.value) and expected in str(err.value), str(err.value)


def test_env_values_are_typed_and_sourced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMAN_LLM_ENABLED", "off")
    monkeypatch.setenv("MEMMAN_SCORING_ROLE_SCORES", '{"user": 0.9}')
    cfg = Config.load(short_tmpdir() / "none.toml")
    assert cfg.llm.enabled is False and cfg.scoring.role_scores == {"user": 0.9}
    assert cfg.sources["llm.enabled"] == "env MEMMAN_LLM_ENABLED"
    monkeypatch.setenv("MEMMAN_LLM_ENABLED", "perhaps")
    with pytest.raises(ConfigError, match="MEMMAN_LLM_ENABLED"):
        Config.load(short_tmpdir() / "none.toml")


def test_unknown_memman_variable_warns_with_the_closest_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMAN_CONTEXT_MAX_TOKEN", "5000")
    cfg = Config.load(short_tmpdir() / "none.toml")
    assert any("MEMMAN_CONTEXT_MAX_TOKEN " in w and "did you mean MEMMAN_CONTEXT_MAX_TOKENS?" in w
               for w in cfg.warnings), cfg.warnings
    assert cfg.context.max_tokens == 8000
    root = short_tmpdir()
    proc = subprocess.Popen([sys.executable, "-m", "memman_daemon", "--socket", str(root / "m.sock"),
                             "--data-dir", str(root / "data")], stderr=subprocess.PIPE, text=True,
                            env={**daemon_env(root), "MEMMAN_CONTXT_MAX_TOKENS": "5"})
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the warning is logged before the daemon serves
            if "MEMMAN_CONTXT_MAX_TOKENS" in line:
                assert "did you mean MEMMAN_CONTEXT_MAX_TOKENS?" in line
                break
        else:
            raise AssertionError("no warning about MEMMAN_CONTXT_MAX_TOKENS")
    finally:
        proc.terminate()
        proc.wait(30)


async def test_a_bad_value_on_reload_is_refused_and_the_old_config_stays() -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[context]\nmax_tokens = 4000\n")
    cfg = Config.load(cfg_file, socket=root / "s" / "m.sock", data_dir=root / "data")
    async with running_daemon(root, config=cfg) as d, d.client() as c:
        cfg_file.write_text('[context]\nmax_tokens = "lots"\n')
        assert d.app.config_watch.reload() is False
        assert d.app.config.context.max_tokens == 4000
        err = (await c.stats())["config"]["last_error"]
        assert "context.max_tokens = 'lots'" in err and "expected an integer" in err
        await c.session_open("s")
        assert (await c.session_context("s"))["tokens"] >= 0  # still serving with the old values
