"""Start the memman daemon in the background when none answers: what ``memman mcp`` and
``memman hook`` do (``python -m memman_daemon``, its own session, output to ``daemon.log`` in
the data dir; it keeps running after its starter exits). Light: no import of the daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from memman import paths
from memman.errors import ConnectionLost
from memman.paths import daemon_answers


def start_daemon(sock: Path, timeout: float = 30.0) -> int:
    """Start ``python -m memman_daemon`` in the background (its own session, output to
    ``daemon.log`` in the data dir); wait until it answers. Returns its pid."""
    log_dir = paths.data_dir()
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "daemon.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memman_daemon", "--socket", str(sock)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon_answers(sock):  # ours, or one another client started at the same moment
            return proc.pid
        if proc.poll() is not None:
            if daemon_answers(sock):
                return proc.pid
            why = _last_line(log_dir / "daemon.log")
            raise ConnectionLost(f"no memman daemon answers at {sock}, and the one started "
                                 f"there exited at once (code {proc.returncode})"
                                 + (f": {why}" if why else "")
                                 + f" (log: {log_dir / 'daemon.log'})")
        time.sleep(0.05)
    raise ConnectionLost(f"the memman daemon did not open {sock} within {timeout:.0f} s; "
                         f"see {log_dir / 'daemon.log'}")


def _last_line(log: Path) -> str:
    """The daemon's last log line (why it stopped), without its time and level prefix."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else ""
