"""Reading a file that someone else may have replaced with something that is not a file.

``read_regular`` opens with ``O_NONBLOCK`` (opening a FIFO then returns at once instead of
waiting for a writer), refuses anything whose ``fstat`` is not a regular file (a FIFO, a
directory, a device, a socket) and reads at most ``max_bytes``: the caller's limit, named in
the error. Used for config.toml (client and daemon) and agent.md (the daemon, on a worker
thread). A file that is absent raises ``FileNotFoundError`` as ``open`` would.
"""

from __future__ import annotations

import os
import stat


class NotARegularFile(OSError):
    """The path exists but is not a regular file, or is larger than allowed; the message says
    which and what to do."""


def _what(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], max_bytes: int, what: str = "file",
                 limit_name: str = "") -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``), never blocking on a FIFO."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"{what} {os.fspath(path)} is {_what(st.st_mode)}, not a "
                                  "regular file; replace it with a file (or remove it)")
        if st.st_size > max_bytes:
            raise NotARegularFile(_too_large(path, what, st.st_size, max_bytes, limit_name))
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:  # grew while being read
                raise NotARegularFile(_too_large(path, what, size, max_bytes, limit_name))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_large(path: str | os.PathLike[str], what: str, size: int, max_bytes: int,
               limit_name: str) -> str:
    limit = f" ({limit_name})" if limit_name else ""
    return (f"{what} {os.fspath(path)} is {size} bytes, over the {max_bytes}-byte limit{limit}; "
            "shorten it")
