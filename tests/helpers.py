"""Test helpers: a real daemon on a real socket with a real SQLite file.

    async with running_daemon() as d:          # in-process
        async with d.client() as c:
            await c.session_open("s1")

    with daemon_process() as p:                # a subprocess (kill -9 tests, CLI tests)
        ...

Socket paths are limited to ~107 bytes, so every daemon gets a short directory under /tmp.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memman.client import Client
from memman.config import Config
from memman_daemon.app import App
from memman_daemon.clock import Clock
from memman_daemon.server import Server


def short_tmpdir(prefix: str = "mm") -> Path:
    d = Path(tempfile.mkdtemp(dir="/tmp", prefix=prefix))
    d.chmod(0o700)
    return d


def make_config(root: Path, **sections: dict[str, Any]) -> Config:
    """A Config rooted in ``root`` (socket root/s/memman.sock, data root/data); no user files."""
    cfg = Config.load(root / "no-config.toml", socket=root / "s" / "memman.sock",
                      data_dir=root / "data", overrides=sections)
    # no real OpenAI endpoint in tests unless a test sets one
    cfg.llm.api_key_env = "MEMMAN_TEST_NO_KEY"
    return cfg


@dataclass
class RunningDaemon:
    server: Server
    root: Path

    @property
    def app(self) -> App:
        return self.server.app

    @property
    def socket(self) -> Path:
        return Path(self.server.config.socket)

    @contextlib.asynccontextmanager
    async def client(self, name: str = "test") -> AsyncIterator[Client]:
        c = await Client.connect(self.socket, name=name)
        try:
            yield c
        finally:
            await c.close()


@contextlib.asynccontextmanager
async def running_daemon(root: Path | None = None, *, clock: Clock | None = None,
                         read_only: bool = False, config: Config | None = None,
                         **sections: dict[str, Any]) -> AsyncIterator[RunningDaemon]:
    """Start the daemon in this event loop; stop it (gracefully) on exit."""
    own = root is None
    root = root or short_tmpdir()
    cfg = config or make_config(root, **sections)
    server = Server(cfg, clock=clock, read_only=read_only)
    task = asyncio.create_task(server.serve(install_signal_handlers=False))
    started = asyncio.create_task(server.started.wait())
    done, _ = await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        started.cancel()
        task.result()  # raises the startup error
    try:
        yield RunningDaemon(server, root)
    finally:
        server.request_stop()
        await asyncio.wait_for(task, 30)
        if own:
            shutil.rmtree(root, ignore_errors=True)


@dataclass
class DaemonProcess:
    proc: subprocess.Popen[bytes]
    root: Path
    socket: Path
    data_dir: Path
    log: Path

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@contextlib.asynccontextmanager
async def embedded_together(app: App) -> AsyncIterator[None]:
    """What is added inside is embedded after it, in one batch: the int8 search model
    quantizes a batch's activations together, so a text's vector moves a little with the
    texts it is embedded beside, and a test comparing windows at a near tie must not depend
    on how the adds met the background embedder."""
    from memman_daemon.component import stop_task

    await stop_task(app.embed_queue._task)
    try:
        yield
    finally:
        await app.embed_queue.load()


def wait_for_socket(path: Path, proc: subprocess.Popen[bytes] | None = None,
                    timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(str(path))
                return
            finally:
                s.close()
        time.sleep(0.05)
    raise TimeoutError(f"daemon socket {path} did not appear")


def daemon_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    env["MEMMAN_CONFIG"] = str(root / "no-config.toml")
    env["TIKTOKEN_CACHE_DIR"] = str(root / "tiktoken")
    return env


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM (the daemon's graceful stop), then SIGKILL if it has not exited in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def daemon_process(root: Path | None = None, *extra: str) -> Iterator[DaemonProcess]:
    """Run ``python -m memman_daemon`` as a subprocess on a fresh socket and data dir."""
    own = root is None
    root = root or short_tmpdir()
    sock, data, log = root / "s" / "memman.sock", root / "data", root / "daemon.log"
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memman_daemon", "--socket", str(sock), "--data-dir", str(data),
             *extra], stdout=logf, stderr=subprocess.STDOUT, env=daemon_env(root))
    dp = DaemonProcess(proc, root, sock, data, log)
    try:
        wait_for_socket(sock, proc)
        yield dp
    finally:
        stop_process(proc)
        if own:
            shutil.rmtree(root, ignore_errors=True)
