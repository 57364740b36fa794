"""Where memman keeps its socket, data and config.

Each path resolves in order: explicit flag, ``MEMMAN_*`` environment variable, the XDG base
directory, then a per-user fallback (the socket fallback is announced with a warning).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SOCKET_NAME = "memman.sock"


def _xdg(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else default


def socket_path(flag: str | os.PathLike | None = None) -> tuple[Path, str | None]:
    """The socket path and, when the per-user fallback was used, a warning to show."""
    if flag:
        return Path(flag), None
    if env := os.environ.get("MEMMAN_SOCKET"):
        return Path(env), None
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(runtime) / "memman" / SOCKET_NAME, None
    fallback = Path(tempfile.gettempdir()) / f"memman-{os.getuid()}" / SOCKET_NAME
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
