"""systemd units and socket activation, against the real tools.

- ``systemd-analyze verify --user`` on both units (checked-in and as installed), failing on any
  warning it prints;
- the daemon started by ``systemd-socket-activate`` answers a request on the inherited socket and
  sends ``READY=1`` to the test's own ``$NOTIFY_SOCKET``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memman.sync_client import SyncClient
from memman_daemon import systemd_units
from tests.helpers import daemon_env, short_tmpdir, stop_process

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed")
needs_activate = pytest.mark.skipif(shutil.which("systemd-socket-activate") is None,
                                    reason="systemd-socket-activate is not installed")


@pytest.fixture
def tmp() -> Path:
    d = short_tmpdir("mmops")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def analyze_verify(unit_dir: Path, runtime: Path) -> subprocess.CompletedProcess[str]:
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_LEVEL="info")
    return subprocess.run(
        ["systemd-analyze", "verify", "--user",
         str(unit_dir / "memman.socket"), str(unit_dir / "memman.service")],
        capture_output=True, text=True, env=env, timeout=60)


@needs_analyze
def test_checked_in_units_verify_without_warnings(tmp: Path) -> None:
    r = analyze_verify(UNITS, tmp / "rt")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (r.stdout + r.stderr).strip() == "", "systemd-analyze warned:\n" + r.stdout + r.stderr


@needs_analyze
def test_installed_units_verify_without_warnings(tmp: Path) -> None:
    written, _ = systemd_units.install_units(tmp / "units")
    r = analyze_verify(tmp / "units", tmp / "rt")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (r.stdout + r.stderr).strip() == "", "systemd-analyze warned:\n" + r.stdout + r.stderr
    assert sorted(p.name for p in written) == ["memman.service", "memman.socket"]


def test_install_writes_absolute_exec_start_and_says_what_next(tmp: Path) -> None:
    written, next_cmd = systemd_units.install_units(tmp / "units")
    service = (tmp / "units" / "memman.service").read_text()
    exec_line = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    program = exec_line.removeprefix("ExecStart=").split()[0].strip('"')
    assert Path(program).is_absolute() and os.access(program, os.X_OK), exec_line
    assert Path(program).parent == Path(sys.executable).parent
    assert "Type=notify" in service and "NoNewPrivileges=yes" in service
    assert "Restart=on-failure" in service
    sock = (tmp / "units" / "memman.socket").read_text()
    assert "ListenStream=%t/memman/memman.sock" in sock
    assert "SocketMode=0600" in sock and "DirectoryMode=0700" in sock
    assert "systemctl --user" in next_cmd and "memman.socket" in next_cmd
    assert all(p.is_file() for p in written)


def test_dry_run_writes_nothing(tmp: Path) -> None:
    written, next_cmd = systemd_units.install_units(tmp / "units", dry_run=True)
    assert [p.name for p in written] == list(systemd_units.UNIT_NAMES)
    assert not (tmp / "units").exists()
    assert next_cmd


def test_default_destination_is_the_user_unit_dir(tmp: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp / "cfg"))
    written, _ = systemd_units.install_units(dry_run=True)
    assert written[0].parent == tmp / "cfg" / "systemd" / "user"


def test_packaged_fallback_matches_the_unit_files() -> None:
    for name in systemd_units.UNIT_NAMES:
        assert systemd_units._FALLBACK[name] == (UNITS / name).read_text(), name


@needs_activate
def test_socket_activated_daemon_answers_and_notifies_ready(tmp: Path) -> None:
    sock_path = tmp / "s" / "memman.sock"
    sock_path.parent.mkdir(mode=0o700)
    notify_path = tmp / "notify"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(30)
    env = daemon_env(tmp)
    passed = {k: env[k] for k in ("MEMMAN_CONFIG", "TIKTOKEN_CACHE_DIR")}
    passed["NOTIFY_SOCKET"] = str(notify_path)
    cmd = ["systemd-socket-activate", "-l", str(sock_path)]
    for k, v in passed.items():
        cmd += ["-E", f"{k}={v}"]
    # the very command the installed memman.service runs
    cmd += [*shlex.split(systemd_units.exec_start()), "--socket", str(sock_path),
            "--data-dir", str(tmp / "data")]
    log = open(tmp / "daemon.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 30
        while not sock_path.exists():  # systemd-socket-activate binds before anything runs
            assert proc.poll() is None, (tmp / "daemon.log").read_text()
            assert time.monotonic() < deadline, "the activation socket never appeared"
            time.sleep(0.02)
        # the first connection starts the daemon, which takes the listening socket as fd 3
        with SyncClient(sock_path, timeout=60) as c:
            info = c.call("memman_get_api_info")
            assert info["api_level"] >= 1
            assert c.call("memman_ping") == "pong"
            # it reports the socket systemd handed it, not its own default path
            assert c.call("memman_stats")["socket"] == str(sock_path)
        messages = []
        while not any("READY=1" in m for m in messages):
            messages.append(notify.recv(4096).decode())
        ready = next(m for m in messages if "READY=1" in m)
        assert "STATUS=" in ready
        assert f"MAINPID={proc.pid}" in ready  # socket-activate execs the daemon in place
    finally:
        notify.close()
        stop_process(proc)
        log.close()
    assert proc.returncode == 0, (tmp / "daemon.log").read_text()
