"""Where memman keeps its socket, data and config.

Each path resolves in order: explicit flag, ``MEMMAN_*`` environment variable, the XDG base
directory, then a per-user fallback (the socket fallback is announced with a warning).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from memman.errors import FORBIDDEN, MemmanError

SOCKET_NAME = "memman.sock"


def _xdg(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else default


def socket_path(flag: str | os.PathLike | None = None) -> tuple[Path, str | None]:
    """The socket path and, when the per-user fallback was used, a warning to show.

    Without ``XDG_RUNTIME_DIR`` (MCP clients such as Claude Desktop, cron, ``sudo -u``) the
    default is still the same for every process of one user, whatever else their environment
    holds: ``/run/user/UID/memman/memman.sock`` when that directory exists and is ours (it is
    what ``XDG_RUNTIME_DIR`` would have named), else ``/tmp/memman-UID/memman.sock`` (``/tmp``
    itself, not ``$TMPDIR``, which launchers set differently; 30-odd bytes, far below the
    107-byte limit of a socket path)."""
    if flag:
        return Path(flag), None
    if env := os.environ.get("MEMMAN_SOCKET"):
        return Path(env), None
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(runtime) / "memman" / SOCKET_NAME, None
    uid = os.getuid()
    run_user = Path(f"/run/user/{uid}")
    try:
        st = os.lstat(run_user)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            return run_user / "memman" / SOCKET_NAME, None
    except OSError:
        pass
    fallback = Path("/tmp") / f"memman-{uid}" / SOCKET_NAME
    return fallback, (
        f"XDG_RUNTIME_DIR is not set; using {fallback}. "
        "Set XDG_RUNTIME_DIR or MEMMAN_SOCKET to choose the socket location."
    )


def data_dir(flag: str | os.PathLike | None = None) -> Path:
    if flag:
        return Path(flag)
    if env := os.environ.get("MEMMAN_DATA_DIR"):
        return Path(env)
    return _xdg("XDG_DATA_HOME", Path.home() / ".local" / "share") / "memman"


def config_path(flag: str | os.PathLike | None = None) -> Path:
    if flag:
        return Path(flag)
    if env := os.environ.get("MEMMAN_CONFIG"):
        return Path(env)
    return _xdg("XDG_CONFIG_HOME", Path.home() / ".config") / "memman" / "config.toml"


# --- ids as file names ------------------------------------------------------------------------
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
_MAX_COMPONENT = 200  #: bytes; file systems allow 255


def id_to_filename(name: str) -> str:
    """One path component for an id (tenant, user, session): ids are names, never paths.

    Letters, digits, ``_``, ``-`` and ``.`` (not leading) stay as they are; every other byte
    of the UTF-8 text becomes ``%XX``, so ``/``, ``..``, NUL or an absolute path can never
    leave the directory the component is joined to, and two ids never share a file. A result
    longer than 200 bytes is shortened to its first 150 bytes, ``~`` and a SHA-256 digest.
    """
    import hashlib

    raw = name.encode("utf-8", "surrogatepass")
    out = []
    for i, b in enumerate(raw):
        c = chr(b)
        if c in _SAFE and not (i == 0 and c == "."):
            out.append(c)
        else:
            out.append(f"%{b:02X}")
    enc = "".join(out) or "%"
    if len(enc) > _MAX_COMPONENT:
        enc = enc[:150] + "~" + hashlib.sha256(raw).hexdigest()[:40]
    return enc


def filename_to_id(component: str) -> str | None:
    """The id an ``id_to_filename`` component stands for (None for a shortened one, or a
    component no id maps to)."""
    if component == "%":
        return ""
    if "~" in component:
        return None
    from urllib.parse import unquote_to_bytes

    try:
        name = unquote_to_bytes(component).decode()
    except UnicodeDecodeError:
        return None
    return name if id_to_filename(name) == component else None


# --- whose socket is it -----------------------------------------------------------------------
class SocketOwnerError(MemmanError):
    """The socket (or its directory) belongs to another user, or is open to others."""

    def __init__(self, message: str) -> None:
        super().__init__(FORBIDDEN, message)


def check_socket_owner(path: str | os.PathLike) -> None:
    """Before sending anything: the socket and its directory must be ours.

    The directory must be a real directory (not a symlink) owned by this uid and not writable
    by others (else someone else could swap the socket); the socket must be a socket owned by
    this uid. Raises ``SocketOwnerError`` saying what is wrong and what to do; a missing socket
    is left to ``connect`` to report.
    """
    import stat

    p = Path(path)
    uid = os.getuid()
    d = p.parent
    try:
        dst = os.lstat(d)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(dst.st_mode):
        target = os.stat(d) if os.path.exists(d) else None
        owners = {dst.st_uid, target.st_uid if target is not None else -1}
        if owners != {uid}:
            other = ", ".join(f"uid {o}" for o in sorted(owners - {uid}) if o >= 0) or "nobody"
            raise SocketOwnerError(f"refusing to use {p}: its directory {d} is a symlink (or "
                                   f"points to a directory) owned by {other}, not by you (uid "
                                   f"{uid}); someone else may be listening there. Remove it or "
                                   "set MEMMAN_SOCKET / XDG_RUNTIME_DIR")
        if target is None:  # a dangling link (ours): nothing listens there
            return
        dst = target
    if dst.st_uid != uid:
        raise SocketOwnerError(f"refusing to use {p}: its directory {d} is owned by uid "
                               f"{dst.st_uid}, not by you ({uid}); someone else may be listening "
                               "there. Remove it or set MEMMAN_SOCKET / XDG_RUNTIME_DIR")
    if dst.st_mode & 0o022 and not dst.st_mode & stat.S_ISVTX:
        raise SocketOwnerError(f"refusing to use {p}: its directory {d} is writable by others "
                               f"(mode {stat.S_IMODE(dst.st_mode):o}). Run `chmod 700 {d}`")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketOwnerError(f"refusing to use {p}: it is not a socket")
    if st.st_uid != uid:
        raise SocketOwnerError(f"refusing to use {p}: the socket is owned by uid {st.st_uid}, "
                               f"not by you ({uid}); it is not your memman daemon. Remove it "
                               "or set MEMMAN_SOCKET / XDG_RUNTIME_DIR")


def daemon_answers(sock: Path) -> bool:
    """Something accepts connections on ``sock`` (a daemon is up), without sending anything."""
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(str(sock))
        return True
    except OSError:
        return False
    finally:
        s.close()
