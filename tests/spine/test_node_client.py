"""The Node example in docs/protocol.md, run as written against a real daemon.

Needs ``node`` and ``npm`` (the package @msgpack/msgpack is installed into a temp folder from
the npm registry); skipped when node is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import daemon_process, short_tmpdir

NODE, NPM = shutil.which("node"), shutil.which("npm")
pytestmark = pytest.mark.skipif(NODE is None or NPM is None, reason="node/npm not installed")


def test_the_node_example_in_protocol_md_works() -> None:
    assert NODE is not None and NPM is not None
    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    start = text.index("```js\n", text.index("Node (with `npm install @msgpack/msgpack`)")) + 6
    example = text[start:text.index("```", start)]
    tmp = short_tmpdir()
    (tmp / "package.json").write_text('{"name": "memman-node-example", "private": true}\n')
    r = subprocess.run([NPM, "install", "--no-audit", "--no-fund", "--silent", "@msgpack/msgpack"],
                       cwd=tmp, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"npm could not install @msgpack/msgpack: {r.stderr[-300:]}")
    (tmp / "example.js").write_text(example)
    with daemon_process() as d:
        r = subprocess.run([NODE, "example.js"], cwd=tmp, capture_output=True, text=True,
                           timeout=60, env={**os.environ, "MEMMAN_SOCKET": str(d.socket)})
    assert r.returncode == 0, r.stderr
    assert "hello from node" in r.stdout
    assert "[-32001] session 'nope' not found" in r.stdout
