"""Ids are names, not paths; clients check whose socket they talk to.

Problem 3: a tenant id like ``../../..`` or an absolute path (also through an import's
``meta.tenant_id``) reached outside the data dir when promoting to business and when reading
agent.md. Problem 11: clients connected to a socket (or through a directory) owned by another
uid and sent it ``set_client_info``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from memman import names, paths
from memman.client import Client
from memman.errors import FORBIDDEN, MemmanError
from memman.sync_client import SyncClient
from tests.helpers import running_daemon, short_tmpdir


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


async def test_tenant_ids_never_leave_the_data_dir() -> None:
    root = short_tmpdir()
    outside = root / "outside"
    outside.mkdir()
    # an agent.md that must never be read, where a crafted tenant id would point
    (outside / "agent.md").write_text("# secret\n- the vault code is zebra-42\n")
    (outside / "tenants").mkdir()
    data = root / "data"
    hostile = ["../../..", "..", str(outside), "../outside", "a/../../outside", ".", "x\x01y",
               "/", "~", "%2E%2E"]
    async with running_daemon(root, docs={"watch": False}) as d, d.client() as c:
        before_outside = _files_under(outside)
        for i, tenant in enumerate(hostile):
            sid = f"s{i}"
            await c.call(names.SESSION_OPEN, sid, {"tenant_id": tenant})
            w = await c.call(names.SCRATCHPAD_WRITE, sid, f"the deploy window is {i} pm")
            r = await c.call(names.SCRATCHPAD_PROMOTE, sid, w["snippet"]["id"], "business", {})
            assert r["changed"]
            listed = await c.call(names.DOCS_LIST, tenant)
            md = Path(listed["agent_md"]).resolve()
            assert md.is_relative_to((data / "tenants").resolve()), md
            assert md.read_text().count(f"window is {i} pm") == 1
            found = await c.call(names.DOCS_SEARCH, tenant, "vault code zebra")
            assert not any("zebra" in r["text"] for r in found["results"]), found
        # the same through an import's meta.tenant_id
        exported = await c.call(names.SESSION_EXPORT, "s0")
        exported["meta"]["tenant_id"] = str(outside)
        await c.call(names.SESSION_IMPORT, exported, {"session_id": "imp"})
        w = await c.call(names.SCRATCHPAD_WRITE, "imp", "imported note")
        await c.call(names.SCRATCHPAD_PROMOTE, "imp", w["snippet"]["id"], "business", {})
        assert _files_under(outside) == before_outside
        assert not (root / "agent.md").exists() and not Path("/agent.md").exists()
        # distinct ids never share a file
        mds = {(await c.call(names.DOCS_LIST, t))["agent_md"] for t in hostile}
        assert len(mds) == len(hostile)
    # after a restart every tenant's agent.md is found again under its own id
    async with running_daemon(root, docs={"watch": False}) as d, d.client() as c:
        for i, tenant in enumerate(hostile):
            hits = await c.call(names.DOCS_SEARCH, tenant, f"deploy window {i}")
            assert hits["results"], tenant
            found = await c.call(names.DOCS_SEARCH, tenant, "vault zebra")
            assert not any("zebra" in r["text"] for r in found["results"]), found


def test_the_file_name_encoding_is_one_to_one() -> None:
    ids = ["a", "A", "a.b", ".a", "..", "../x", "a/b", "a%2Fb", "é", "a b", "-", "_", "x" * 600,
           "x" * 601, "%", ""]
    encoded = [paths.id_to_filename(i) for i in ids]
    assert len(set(encoded)) == len(ids)
    for i, e in zip(ids, encoded, strict=True):
        assert "/" not in e and "\x00" not in e and not e.startswith(".") and len(e) <= 200
        if len(e) < 150:
            assert paths.filename_to_id(e) == i


def _serve(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(8)
    return s


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make files owned by another uid")
async def test_clients_refuse_a_socket_owned_by_another_uid() -> None:
    """The squatter's socket (or its directory) belongs to uid 65534: both clients refuse
    before sending a byte; the squatter receives nothing."""
    root = short_tmpdir()
    for where in ("socket", "directory", "symlinked directory"):
        d = root / where.replace(" ", "-")
        d.mkdir(mode=0o700)
        target = d
        if where == "symlinked directory":
            real = root / "real-dir"
            real.mkdir(mode=0o700)
            os.chown(real, 65534, 65534)
            d.rmdir()
            d.symlink_to(real)
            target = real
        path = target / "memman.sock"
        srv = _serve(path)
        srv.setblocking(False)
        if where == "socket":
            os.chown(path, 65534, 65534)
        elif where == "directory":
            os.chown(d, 65534, 65534)
        try:
            sock_path = d / "memman.sock"
            with pytest.raises(MemmanError) as ei:
                SyncClient(sock_path, timeout=2)
            assert ei.value.code == FORBIDDEN and "uid 65534" in ei.value.message
            with pytest.raises(MemmanError) as ei:
                await Client.connect(sock_path, timeout=2)
            assert ei.value.code == FORBIDDEN
            with pytest.raises(BlockingIOError):
                srv.accept()  # nobody even connected
        finally:
            srv.close()


async def test_clients_refuse_a_socket_directory_open_to_others() -> None:
    root = short_tmpdir()
    d = root / "open"
    d.mkdir()
    d.chmod(0o777)
    srv = _serve(d / "memman.sock")
    try:
        with pytest.raises(MemmanError) as ei:
            await asyncio.to_thread(SyncClient, d / "memman.sock", timeout=2)
        assert ei.value.code == FORBIDDEN and "chmod 700" in ei.value.message
    finally:
        srv.close()


async def test_clients_still_connect_to_their_own_daemon() -> None:
    async with running_daemon() as d:
        async with d.client() as c:
            assert await c.call(names.PING) == "pong"
        with await asyncio.to_thread(SyncClient, d.socket) as sc:
            assert await asyncio.to_thread(sc.call, names.PING) == "pong"
