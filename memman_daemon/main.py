"""Daemon entry point: parse flags, load config, run the server."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from memman import paths
from memman.config import Config
from memman_daemon.server import Server, StartupError
from memman_daemon.sessions import LoadError
from memman_daemon.storage.sqlite.store import StoreError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="memman daemon", description="Run the memman daemon.")
    p.add_argument("--socket", help="socket path (env MEMMAN_SOCKET; default "
                                    "$XDG_RUNTIME_DIR/memman/memman.sock)")
    p.add_argument("--data-dir", help="data directory (env MEMMAN_DATA_DIR; default "
                                      "$XDG_DATA_HOME/memman)")
    p.add_argument("--config", help="config file (env MEMMAN_CONFIG; default "
                                    "$XDG_CONFIG_HOME/memman/config.toml)")
    p.add_argument("--read-only", action="store_true", help="refuse every method that changes memory")
    p.add_argument("--shared", metavar="POSTGRESQL_URL",
                   help="keep user memory, business context and their audit in this PostgreSQL "
                        "database, shared with every daemon naming it (env MEMMAN_STORAGE_SHARED; "
                        "[storage] shared; default: the local SQLite file)")
    p.add_argument("--log-level", default="INFO", type=str.upper, metavar="LEVEL",
                   choices=LOG_LEVELS, help=f"one of {', '.join(LOG_LEVELS)} (default INFO)")
    return p


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # watchfiles logs every batch of changes at INFO; memman logs what it does with them
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    _, warning = paths.socket_path(args.socket)
    socket_activated = os.environ.get("LISTEN_PID") == str(os.getpid())
    os.umask(0o077)  # the database, agent.md files and logs hold private memory: owner only
    if warning and not socket_activated:
        logging.getLogger("memman.daemon").warning(warning)
    try:
        config = Config.load(args.config, socket=args.socket, data_dir=args.data_dir)
        if getattr(args, "shared", None):
            config.storage.shared = args.shared
        for warning in config.warnings:
            logging.getLogger("memman.config").warning(warning)
        return Server(config, read_only=args.read_only).run()
    except (StartupError, StoreError, LoadError, ValueError) as exc:
        print(f"memman daemon: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
