"""`make run`: daemon (if none answers) + demo agents in the background + the TUI in front.

    python -m memman_cli.launcher [--sessions N] [--rate R] [--socket PATH] [--data-dir DIR]

Quitting the TUI stops everything this launcher started (the demo, and the daemon if it started
it). Without a terminal on stdin (CI), it runs the demo for a few seconds and prints a summary
instead of opening the TUI. The daemon runs as its own process: the TUI never imports it.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

from memman import paths
from memman.paths import daemon_answers


def wait_for(sock: Path, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the memman daemon exited at start (code {proc.returncode}); "
                             "run `python -m memman_daemon` to see why")
        if daemon_answers(sock):
            return
        time.sleep(0.05)
    raise SystemExit(f"the memman daemon did not open {sock} within {timeout:.0f} s")


def stop(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def summary(sock: Path) -> str:
    import asyncio

    from memman.client import Client
    from memman.fullness import fullness

    async def fetch() -> str:
        client = await Client.connect(sock, name="memman-launcher")
        try:
            stats = await client.call("memman_stats")
            rows = await client.call("memman_session_list")
            series = {r["session_id"]: (await client.call(
                "memman_session_series", r["session_id"], {"limit": 20}))["points"]
                for r in rows}
        finally:
            await client.close()
        out = [f"daemon: {stats.get('sessions')} sessions, {stats.get('entries')} entries, "
               f"{stats.get('requests')} requests, db {stats.get('database_bytes')} B, "
               f"tokenizer {(stats.get('tokenizer') or {}).get('encoding')}"]
        for r in sorted(rows, key=lambda r: r["session_id"]):
            f = fullness(r, series.get(r["session_id"]))  # as the TUI and `memman sessions`
            sent = "-" if f.sent_usage is None else f"{f.sent_usage:.0%}"
            hist = "-" if f.history_usage is None else f"{f.history_usage:.0%}"
            out.append(f"  {r['session_id']:<12} user {r.get('user_id', '-'):<8} "
                       f"sent {sent:>4} history {hist:>5} of {f.budget:,} tokens  "
                       f"entries {r.get('entries')}  exchanges {r.get('exchanges')}  "
                       f"summaries {r.get('summaries')}")
        return "\n".join(out)

    return asyncio.run(fetch())


def next_steps(python: str | None = None, path: str | None = None) -> str:
    """The exact commands to use next: how to get ``memman`` on PATH from here (unless it is
    already this one), then what to run."""
    import os
    import shutil

    bindir = Path(python or sys.executable).parent
    script = bindir / "memman"
    on_path = shutil.which("memman", path=path)
    lines = []
    if on_path is None or Path(on_path).resolve() != script.resolve():
        activate = bindir / "activate"
        shown = os.path.relpath(activate) if activate.is_relative_to(Path.cwd()) else activate
        lines.append(f"next: source {shown}        # puts `memman` on PATH in this shell "
                     "(or, for every shell: pipx install .)")
    lines.append("then: memman status   ·   memman sessions   ·   "
                 "memman mcp config claude-code   (plug memman into your agent)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memman run", description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", help="daemon socket (default: the usual memman socket)")
    p.add_argument("--data-dir", help="daemon data dir when this launcher starts the daemon")
    p.add_argument("--sessions", type=int, default=6, help="demo agents (default 6)")
    p.add_argument("--rate", type=float, default=0.5, help="cycles/s per agent (default 0.5)")
    p.add_argument("--duration", type=float, default=None,
                   help="demo seconds (default: 1 hour with the TUI, 5 s without a terminal)")
    p.add_argument("--read-only", action="store_true", help="open the TUI read-only")
    p.add_argument("--no-tui", action="store_true", help="never open the TUI; print a summary")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sock, warning = paths.socket_path(args.socket)
    if warning:
        print(warning, file=sys.stderr)
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not args.no_tui
    duration = args.duration or (3600.0 if interactive else 5.0)
    py = sys.executable
    daemon: subprocess.Popen | None = None
    demo: subprocess.Popen | None = None
    log_dir = Path(args.data_dir) if args.data_dir else paths.data_dir()
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        if daemon_answers(sock):
            print(f"using the memman daemon at {sock}")
        else:
            cmd = [py, "-m", "memman_daemon", "--socket", str(sock)]
            if args.data_dir:
                cmd += ["--data-dir", args.data_dir]
            with open(log_dir / "daemon.log", "ab") as log:
                daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT)
            wait_for(sock, daemon)
            print(f"started the memman daemon (pid {daemon.pid}) at {sock}; "
                  f"log {log_dir / 'daemon.log'}")
        demo_cmd = [py, "-m", "memman_cli.demo", "--socket", str(sock), "--sessions",
                    str(args.sessions), "--rate", str(args.rate), "--duration", str(duration)]
        demo_out = subprocess.DEVNULL if interactive else None
        with open(log_dir / "demo.log", "ab") as log:
            demo = subprocess.Popen(demo_cmd, stdin=subprocess.DEVNULL,
                                    stdout=log if interactive else demo_out,
                                    stderr=log if interactive else None)
        if interactive:
            from memman_tui.app import main as tui_main

            tui_args = ["--socket", str(sock)] + (["--read-only"] if args.read_only else [])
            return tui_main(tui_args)
        print(f"no terminal on stdin: running the demo for {duration:g} s instead of the TUI")
        demo.wait(duration + 60)
        print(summary(sock))
        # and one session in full, as `memman show` prints it
        subprocess.run([py, "-m", "memman_cli.cli", "--socket", str(sock), "show", "demo-01"],
                       check=False)
        return 0 if demo.returncode == 0 else 1
    except KeyboardInterrupt:
        return 130
    finally:
        stop(demo)
        stop(daemon)
        print(next_steps())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
