"""systemd integration without a dependency: socket activation and sd_notify.

``listen_fds()`` returns sockets passed by systemd (``LISTEN_FDS`` / ``LISTEN_PID``, first fd 3).
``notify("READY=1")`` writes to ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract
namespace); it is a no-op when the daemon was not started by systemd.
"""

from __future__ import annotations

import os
import socket

SD_LISTEN_FDS_START = 3


def listen_fds(unset: bool = True) -> list[socket.socket]:
    try:
        pid = int(os.environ.get("LISTEN_PID", "0"))
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return []
    if pid != os.getpid() or count <= 0:
        return []
    if unset:  # children must not think the fds are theirs
        for var in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(var, None)
    socks = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count):
        os.set_inheritable(fd, False)
        socks.append(socket.socket(fileno=fd))
    return socks


def notify(state: str) -> bool:
    """Send ``state`` (e.g. "READY=1\\nSTATUS=serving") to systemd; True if it was sent."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(state.encode())
        return True
    except OSError:
        return False
