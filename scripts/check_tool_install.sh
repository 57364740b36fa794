#!/usr/bin/env bash
# The README's install line from a fresh clone with a new HOME: `pipx install .` gives a
# `memman` on PATH; `memman --version` works and `memman mcp` answers the official mcp client.
# Needs the package index (or a warm pip cache / PIP_FIND_LINKS); slow (minutes): CI runs it,
# `make test` does not.   usage: scripts/check_tool_install.sh [CHECKOUT]
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
work=$(mktemp -d /tmp/mmti.XXXXXX)
trap 'rm -rf "$work"' EXIT
export HOME="$work/home" PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/bin"
mkdir -p "$HOME"
unset XDG_RUNTIME_DIR XDG_DATA_HOME XDG_CONFIG_HOME MEMMAN_SOCKET MEMMAN_DATA_DIR VIRTUAL_ENV
export MEMMAN_SOCKET="$work/s/memman.sock"   # short, private; the daemon memman mcp starts
git clone -q "$src" "$work/clone"
python3 -m venv "$work/tools"
"$work/tools/bin/pip" install -q pipx
cd "$work/clone"
"$work/tools/bin/pipx" install . >/dev/null              # the README's install line
export PATH="$PIPX_BIN_DIR:$PATH"
command -v memman
memman --version
memman setup --check || true                             # says whether the weights are there
memman setup                                             # pip --no-deps in memman's own venv
memman setup --check                                     # now they are
"$work/tools/bin/pip" install -q "mcp>=2.3,<3"
"$work/tools/bin/python" - <<'PY'
import asyncio, os, shutil
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main():
    params = StdioServerParameters(command=shutil.which("memman"), args=["mcp", "--user", "ana"],
                                   env=dict(os.environ))
    async with Client(params) as c:
        tools = sorted(t.name for t in (await c.list_tools()).tools)
        assert "remember" in tools, tools
        r = await c.call_tool("remember", {"text": "vim", "key": "editor"})
        assert not r.is_error, r.content
        r = await c.call_tool("recall", {"key": "editor"})
        assert r.structured_content["value"] == "vim", r.content
        print("memman mcp answers the official client:", tools)

asyncio.run(main())
PY
pid=$(memman --json status | python3 -c "import json,sys; print(json.load(sys.stdin).get(\"pid\", \"\"))" || true)
[ -n "$pid" ] && kill "$pid" || true                  # the daemon memman mcp started
echo "OK: pipx install . gives a working memman and memman mcp"
