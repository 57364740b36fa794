"""Config: TOML sections, env overrides, clear errors, reload on change."""

import asyncio
import os

import pytest

from memman.config import Config
from tests.helpers import running_daemon, short_tmpdir


def test_toml_sections_and_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[limits]\nmax_clients = 7\n[context]\nmax_tokens = 4000\n")
    monkeypatch.setenv("MEMMAN_CONTEXT_MAX_TOKENS", "5000")
    cfg = Config.load(cfg_file, socket=root / "x.sock", data_dir=root)
    assert cfg.limits.max_clients == 7
    assert cfg.context.max_tokens == 5000  # env beats the file


def test_unknown_keys_are_named() -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[limits]\nmax_clientz = 7\n")
    with pytest.raises(ValueError, match="unknown key 'max_clientz' in \\[limits\\]"):
        Config.load(cfg_file)
    cfg_file.write_text("[nope]\na = 1\n")
    with pytest.raises(ValueError, match="unknown config section \\[nope\\]"):
        Config.load(cfg_file)


async def test_config_file_change_reloads_in_the_running_daemon() -> None:
    root = short_tmpdir()
    cfg_file = root / "config.toml"
    cfg_file.write_text("[context]\nmax_tokens = 4000\n")
    cfg = Config.load(cfg_file, socket=root / "s" / "m.sock", data_dir=root / "data")
    async with running_daemon(root, config=cfg) as d, d.client() as c:
        assert d.app.config.context.max_tokens == 4000
        cfg_file.write_text("[context]\nmax_tokens = 6000\n")
        for _ in range(100):  # bounded wait for the watcher
            if d.app.config.context.max_tokens == 6000:
                break
            await asyncio.sleep(0.05)
        assert d.app.config.context.max_tokens == 6000
        cfg_file.write_text("[context\n")  # broken: old values stay, error reported
        for _ in range(100):
            if (await c.stats())["config"]["last_error"]:
                break
            await asyncio.sleep(0.05)
        stats = await c.stats()
        assert "not valid TOML" in stats["config"]["last_error"]
        assert d.app.config.context.max_tokens == 6000
        assert os.path.samefile(stats["config"]["path"], cfg_file)
