"""The systemd user units, rendered for this installation (``memman systemd install``).

The templates live in ``systemd/`` (and are packaged beside this module's callers as plain
strings when the repository is not at hand). Installing rewrites the service's ``ExecStart`` to
the absolute path of the running interpreter's ``memman`` console script, so a virtualenv works
without touching the user manager's PATH.

    paths, next_cmd = install_units()              # ~/.config/systemd/user/
    units = render_units()                         # {"memman.socket": "...", ...}; writes nothing
    paths, next_cmd = install_units(dry_run=True)  # where they would go
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from pathlib import Path

UNIT_NAMES = ("memman.socket", "memman.service")
NEXT_COMMAND = "systemctl --user daemon-reload && systemctl --user enable --now memman.socket"
TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "systemd"


def user_unit_dir() -> Path:
    """``$XDG_CONFIG_HOME/systemd/user`` (``~/.config/systemd/user``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def exec_start() -> str:
    """The command that runs the daemon from this installation, with absolute paths.

    The ``memman`` console script beside the interpreter when it exists, else
    ``<python> -m memman_daemon`` (same daemon, same flags).
    """
    script = Path(sys.executable).parent / "memman"
    has_cli = importlib.util.find_spec("memman_cli.cli") is not None
    if has_cli and script.is_file() and os.access(script, os.X_OK):
        return f"{_quote(script)} daemon"
    return f"{_quote(Path(sys.executable))} -m memman_daemon"


def _quote(p: Path) -> str:
    # systemd's ExecStart quoting is close enough to the shell's for paths
    text = str(p.absolute())
    return text if text == shlex.quote(text) else '"' + text.replace('"', '\\"') + '"'


def _template(name: str) -> str:
    path = TEMPLATE_DIR / name
    if path.is_file():
        return path.read_text()
    return _FALLBACK[name]


def render_units(command: str | None = None) -> dict[str, str]:
    """Unit file name -> text, with ``ExecStart`` set to ``command`` (default: exec_start())."""
    command = command or exec_start()
    out = {}
    for name in UNIT_NAMES:
        lines = []
        for line in _template(name).splitlines():
            if line.startswith("ExecStart="):
                line = f"ExecStart={command}"
            lines.append(line)
        out[name] = "\n".join(lines) + "\n"
    return out


def install_units(dest_dir: str | os.PathLike[str] | None = None, *, dry_run: bool = False,
                  command: str | None = None) -> tuple[list[Path], str]:
    """Write memman.socket and memman.service to ``dest_dir`` (default: the user unit dir).

    Returns the unit paths (written, or that would be written when ``dry_run``) and the command
    to run next. Existing files are replaced.
    """
    dest = Path(dest_dir) if dest_dir is not None else user_unit_dir()
    units = render_units(command)
    paths = [dest / name for name in units]
    if not dry_run:
        dest.mkdir(parents=True, exist_ok=True)
        for path, text in zip(paths, units.values(), strict=True):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    if dest.resolve() != user_unit_dir().resolve():  # systemd does not look there by itself
        return paths, ("systemctl --user link " + " ".join(str(p.resolve()) for p in paths)
                       + " && systemctl --user enable --now memman.socket")
    return paths, NEXT_COMMAND


# Used when memman is installed without the repository's systemd/ folder (e.g. from a wheel).
# tests/ops/test_systemd.py checks these stay identical to the files in systemd/.
_FALLBACK = {
    "memman.socket": """\
# memman: the daemon's socket, created by systemd (socket activation).
# The first connection starts memman.service, which takes this socket as LISTEN_FDS.
# `memman systemd install` copies this file to ~/.config/systemd/user/.
[Unit]
Description=memman socket (memory manager for LLM agents)

[Socket]
ListenStream=%t/memman/memman.sock
SocketMode=0600
DirectoryMode=0700
RemoveOnStop=yes
Backlog=1024

[Install]
WantedBy=sockets.target
""",
    "memman.service": """\
# memman: the daemon, started by memman.socket on the first connection.
# Type=notify: the daemon sends READY=1 and STATUS= to $NOTIFY_SOCKET itself once the database
# is open and the socket is served. `memman systemd install` writes this file with ExecStart set
# to the absolute path of the installed `memman` (so a virtualenv needs no PATH changes).
[Unit]
Description=memman daemon (memory manager for LLM agents)
Requires=memman.socket
After=memman.socket

[Service]
Type=notify
NotifyAccess=main
ExecStart=/usr/bin/env memman daemon
Restart=on-failure
RestartSec=2
TimeoutStopSec=30
Environment=PYTHONUNBUFFERED=1
# Hardening that needs no user namespaces (works in every user manager).
UMask=0077
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM
# AF_INET/AF_INET6 for the LLM summarizer's HTTPS endpoint.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6

[Install]
WantedBy=default.target
""",
}
