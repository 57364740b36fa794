"""Headless Neovim as a client, unmodified: ``vim.rpcrequest`` shows memman's error message once
the connection asked for Neovim-style errors (``memman_set_client_info(name, {errors="nvim"})``).

Neovim's channel code only understands an error that is a string or ``[0|1, message]``; memman's
default ``[code, message]`` reaches Lua as an unknown error. Needs Debian's ``neovim`` (.ci/run
installs it when ``nvim`` is missing).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import daemon_process, short_tmpdir

NVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(NVIM is None and not __import__("os").environ.get("CI"),
                                reason="nvim is not installed (apt-get install neovim)")

SCRIPT = r"""
local out = {}
local chan = vim.fn.sockconnect('pipe', SOCKET, {rpc = true})
out.info = vim.rpcrequest(chan, 'memman_get_api_info').api_level
-- memman's own style first: Neovim cannot show [code, message]
local ok, err = pcall(vim.rpcrequest, chan, 'memman_session_get', 'nope')
out.default_ok, out.default_err = ok, tostring(err)
vim.rpcrequest(chan, 'memman_set_client_info', 'nvim-test', {errors = 'nvim'})
ok, err = pcall(vim.rpcrequest, chan, 'memman_session_get', 'nope')
out.nvim_ok, out.nvim_err = ok, tostring(err)
ok, err = pcall(vim.rpcrequest, chan, 'memman_session_add', 'nope', 42)
out.params_err = tostring(err)
out.opened = vim.rpcrequest(chan, 'memman_session_open', 'from-nvim', {user_id = 'ana'}).session_id
local f = io.open(OUT, 'w')
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qa!')
"""


def test_vim_rpcrequest_shows_memmans_error_message() -> None:
    assert NVIM is not None, "nvim is missing: .ci/run installs Debian's neovim"
    tmp = short_tmpdir()
    out = tmp / "out.json"
    with daemon_process() as d:
        script = tmp / "client.lua"
        script.write_text(f"local SOCKET = {json.dumps(str(d.socket))}\n"
                          f"local OUT = {json.dumps(str(out))}\n" + SCRIPT)
        r = subprocess.run([NVIM, "--headless", "--clean", "-u", "NONE", "-i", "NONE", "-n",
                            "-c", f"luafile {script}"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        assert out.exists(), f"nvim wrote nothing: {r.returncode} {r.stdout} {r.stderr}"
        got = json.loads(Path(out).read_text())
    assert got["info"] >= 1
    assert got["default_ok"] is False and got["nvim_ok"] is False
    assert "[-32001] session 'nope' not found" in got["nvim_err"]
    assert "session 'nope' not found" not in got["default_err"]  # why the option exists
    assert "[-32602]" in got["params_err"] and "entry" in got["params_err"]
    assert got["opened"] == "from-nvim"


def _doc_example(lang: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    start = text.index(f"```{lang}\n", text.index("### Neovim-style errors")) + len(lang) + 4
    return text[start:text.index("```", start)]


def test_the_neovim_example_in_protocol_md_works() -> None:
    assert NVIM is not None, "nvim is missing: .ci/run installs Debian's neovim"
    tmp = short_tmpdir()
    out = tmp / "printed.json"
    script = tmp / "example.lua"
    script.write_text(
        "local printed = {}\n"
        "print = function(...) local t = {} for i = 1, select('#', ...) do "
        "t[#t + 1] = tostring(select(i, ...)) end table.insert(printed, table.concat(t, ' ')) end\n"
        + _doc_example("lua")
        + f"\nlocal f = io.open({json.dumps(str(out))}, 'w')\n"
          "f:write(vim.fn.json_encode(printed))\nf:close()\nvim.cmd('qa!')\n")
    with daemon_process() as d:
        env = {**__import__("os").environ, "MEMMAN_SOCKET": str(d.socket)}
        r = subprocess.run([NVIM, "--headless", "--clean", "-u", "NONE", "-i", "NONE", "-n",
                            "-c", f"luafile {script}"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL, env=env)
        assert out.exists(), f"nvim wrote nothing: {r.returncode} {r.stdout} {r.stderr}"
    printed = json.loads(out.read_text())
    tokens, n = printed[0].split()
    assert int(tokens) > 0 and int(n) == 1
    assert printed[1].endswith("[-32001] session 'nope' not found")
