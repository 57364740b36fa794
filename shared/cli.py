"""The ``memman`` command: daemon, status, sessions, show, tui, demo, systemd.

Human output by default; ``--json`` prints the raw result for scripts. Sub-commands that need
the daemon's or the TUI's code import it only when run, so ``memman status`` stays light.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from memman import names
from memman.errors import ConnectionLost, MemmanError


def _client(args: argparse.Namespace) -> Any:
    from memman.sync_client import SyncClient

    return SyncClient(args.socket, name="memman-cli", timeout=10.0)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def cmd_status(args: argparse.Namespace) -> int:
    try:
        with _client(args) as c:
            stats = c.stats()
    except ConnectionLost as exc:
        if args.json:
            _print_json({"running": False, "error": exc.message})
        else:
            print(f"memman: not running — {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        _print_json({"running": True, **stats})
        return 0
    tok = stats.get("tokenizer", {})
    summ = stats.get("summarizer", {})
    print(f"memman {stats['version']} running (pid {stats['pid']}, up {stats['uptime_s']:.0f}s)")
    print(f"  socket     {stats['socket']}")
    print(f"  database   {stats['database']} ({stats['database_bytes'] / 1024:.0f} KiB, "
          f"synchronous={stats['store']['synchronous']})")
    print(f"  clients    {stats['clients']}   requests {stats['requests']}   errors {stats['errors']}")
    print(f"  sessions   {stats['sessions']}   entries {stats['entries']}")
    print(f"  tokenizer  {tok.get('encoding')}")
    if summ:
        print(f"  summarizer {summ.get('mode', summ.get('model', '?'))}")
    emb = stats.get("embeddings") or {}
    if emb:
        print(f"  embeddings {_embeddings_line(emb)}")
    return 0


def _embeddings_line(emb: dict[str, Any]) -> str:
    """``local wordllama/l2_supercat@256, re-embedding 1,200/5,000 (24%, 900/s)``."""
    if emb.get("error"):
        return f"off ({emb['error']})"
    if not emb.get("enabled"):
        return "none (FTS5 only)"
    line = f"{emb.get('provider')} {emb.get('model_id')}"
    re_ = emb.get("reembed") or {}
    if re_.get("state") == "running":
        done, total = re_.get("done", 0), re_.get("total", 0) or 1
        rate = re_.get("rate_per_s")
        line += (f", re-embedding {done:,}/{total:,} ({done / total:.0%}"
                 + (f", {rate:,.0f}/s" if rate else "") + ")")
    elif re_.get("passes"):
        line += f", vectors up to date ({re_.get('done', 0):,} embedded in the last pass)"
    return line


def cmd_sessions(args: argparse.Namespace) -> int:
    with _client(args) as c:
        rows = c.session_list()
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print("no sessions")
        return 0
    print(f"{'SESSION':<24} {'USER':<12} {'TOKENS':>14} {'ENTRIES':>8} {'EXCH':>5} {'SUMMARY':>8}  LAST ACTIVITY")
    for r in sorted(rows, key=lambda r: -r["updated_at"]):
        used = f"{r['active_tokens']}/{r['max_tokens']}"
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["updated_at"]))
        print(f"{r['session_id']:<24} {r['user_id']:<12} {used:>14} {r['entries']:>8} "
              f"{r['exchanges']:>5} {r['summary_bytes']:>7}B  {last}")
    return 0


def render_session(s: dict[str, Any], cache: list[dict[str, Any]] | None) -> str:
    """Seed 000's log shape: MEMORY STATE, FUNCTION CACHE STATE, the entry log."""
    c = s.get("counters", {})
    lines = ["=== MEMORY STATE ===",
             f"Session: {s['session_id']} | Exchanges: {s['exchanges']} | Summary: "
             f"{s['summary_bytes']} bytes | LLM compressions: {c.get('llm_compressions', 0)}",
             f"User: {s['user_id']} | Tenant: {s['tenant_id']} | Model: {s['model']} | "
             f"Encoding: {s.get('encoding', '?')}",
             f"Entries: {s['entries']} ({s['active_entries']} active, {s['summaries']} summaries) | "
             f"Active tokens: {s['active_tokens']}/{s['max_tokens']}"]
    if cache is not None:
        lines += ["", "=== FUNCTION CACHE STATE ===", f"Cached functions: {len(cache)}"]
        for item in cache:
            lines.append(f"  • {item.get('tool_name')}({item.get('parameters')}): "
                         f"{item.get('remaining_duration')}/{item.get('original_duration')} exchanges remaining")
    entries = s.get("entries", [])
    lines += ["", f"=== ENTRY LOG ({len(entries)} entries) ==="]
    for i, e in enumerate(entries, 1):
        flag = " [pinned]" if e.get("pinned") else ""
        flag += f" [in summary {e['summary_id']}]" if e.get("summary_id") else ""
        text = (e.get("content") or "").replace("\n", " ")
        lines.append(f"[{i}] {e['role'].upper()} ({e['type']}, {e['tokens']} tok){flag}: "
                     f"{text[:100]}{'…' if len(text) > 100 else ''}")
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as c:
        try:
            if args.json:
                _print_json(c.session_get(args.session))
                return 0
            try:  # the engine's full report (context, drops and reasons) when it exists
                print(c.call(names.SESSION_REPORT, args.session)["text"])
                return 0
            except MemmanError as exc:
                if exc.code != -32601:
                    raise
            s = c.session_get(args.session)
            try:
                cache = c.call(names.CACHE_LIST, args.session)
                cache = cache.get("entries", cache) if isinstance(cache, dict) else cache
            except MemmanError:
                cache = None
            print(render_session(s, cache))
        except MemmanError as exc:
            print(f"memman: {exc.message}", file=sys.stderr)
            return 1
    return 0


def cmd_tui(args: argparse.Namespace) -> int:
    from memman_tui.app import main as tui_main

    argv = []
    if args.socket:
        argv += ["--socket", args.socket]
    if args.read_only:
        argv.append("--read-only")
    if args.refresh is not None:
        argv += ["--refresh", str(args.refresh)]
    return tui_main(argv) or 0


def cmd_demo(args: argparse.Namespace, rest: list[str]) -> int:
    from memman.demo import main as demo_main

    argv = (["--socket", args.socket] if args.socket else []) + rest
    return demo_main(argv) or 0


def cmd_systemd(args: argparse.Namespace) -> int:
    from memman_daemon.systemd_units import install_units, render_units

    if args.print:
        for name, text in render_units().items():
            print(f"# {name}\n{text}")
        return 0
    written, next_cmd = install_units(args.dest)
    if args.json:
        _print_json({"written": [str(p) for p in written], "next": next_cmd})
        return 0
    for p in written:
        print(f"wrote {p}")
    print(f"next: {next_cmd}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memman", description="A memory manager for LLM agents.")
    p.add_argument("--socket", help="daemon socket (env MEMMAN_SOCKET)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    # the same two flags after the sub-command (`memman status --json`); SUPPRESS keeps a value
    # given before the sub-command from being reset
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--socket", default=argparse.SUPPRESS, help="daemon socket")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("daemon", help="run the daemon (flags: memman daemon --help)", add_help=False)
    sub.add_parser("status", parents=[common], help="is the daemon running? (exit 1 if not)")
    sub.add_parser("sessions", parents=[common], help="list sessions")
    show = sub.add_parser("show", parents=[common], help="print a session's memory state")
    show.add_argument("session")
    tui = sub.add_parser("tui", parents=[common], help="open the terminal app")
    tui.add_argument("--read-only", action="store_true", help="disable every change")
    tui.add_argument("--refresh", type=float, metavar="SECONDS", help="refresh interval")
    sub.add_parser("demo", help="run demo agents (flags: memman demo --help)", add_help=False)
    sd = sub.add_parser("systemd", help="systemd user units")
    sd_sub = sd.add_subparsers(dest="systemd_command", required=True)
    inst = sd_sub.add_parser("install", parents=[common],
                             help="write memman.socket and memman.service")
    inst.add_argument("--dest", help="directory (default ~/.config/systemd/user)")
    inst.add_argument("--print", action="store_true", help="print the units, write nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "daemon":
        from memman_daemon.main import main as daemon_main

        return daemon_main((["--socket", args.socket] if args.socket else []) + rest)
    if args.command == "demo":
        return cmd_demo(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    commands = {"status": cmd_status, "sessions": cmd_sessions, "show": cmd_show,
                "tui": cmd_tui, "systemd": cmd_systemd}
    try:
        return commands[args.command](args)
    except ConnectionLost as exc:
        print(f"memman: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memman ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
