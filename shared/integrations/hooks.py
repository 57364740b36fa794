"""``memman hook AGENT``: one command behind every hook of a coding agent (Claude Code, Codex).

The agent runs it at each event with the event's JSON on stdin; it acts on
``hook_event_name``:

- ``SessionStart``: opens the conversation's session (agent, project, user), then prints a short
  recap for the project (``startup`` / ``resume``) or the window memman keeps for this
  conversation (``compact`` / ``clear``).
- ``UserPromptSubmit``: logs the prompt, then prints what earlier conversations of the project
  said that bears on it (the window's retriever; nothing already injected in this
  conversation, nothing below the relevance floor; nothing at all when nothing passes).
- ``PostToolUse``: logs the call and its result (a large result as an excerpt and its size).
- ``Stop``: logs the final answer (``last_assistant_message``, else from the transcript) and
  ends the exchange (``memman_session_finalize``).

Whatever it prints is plain dated lines, under ``[hooks] max_chars`` counted on the printed
text. It never fails the agent: any problem (no daemon, a bad event, a bug) is logged to
``hooks.log`` in memman's data dir and the hook exits 0 with nothing on stdout. It is light:
the blocking client and the config, nothing of the MCP SDK, the daemon or the TUI.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memman.hook_config import HooksConfig

AGENTS = ("claude-code", "codex")
MAX_EVENT_BYTES = 16 * 1024 * 1024  #: an event's JSON larger than this is not read
MAX_LINE_CHARS = 700  #: most characters of one injected line (a long entry is cut, marked "…")
TRANSCRIPT_TAIL = 2 * 1024 * 1024  #: bytes of the transcript's end read for the last answer
STATE_DIR = "hooks"  #: in the data dir: per conversation, what was injected and the last prompt
LOG_NAME = "hooks.log"
LOG_MAX_BYTES = 1024 * 1024  #: past this, hooks.log becomes hooks.log.1 and a new one starts
RECALL_HEADER = ("memman — what earlier conversations in this project said that bears on this "
                 "prompt (dated; a newer line wins over an older one):")
RECAP_HEADER = "memman — recap for this project (dated, newest first; a newer line wins):"
WINDOW_HEADER = "memman — what this conversation held before it was compacted (memman's window):"


@dataclass
class Settings:
    """What a hook reads of memman's configuration."""

    socket: Path
    data_dir: Path
    hooks: HooksConfig


#: variables that ``Settings.load``'s short path reads itself (any other MEMMAN_* variable may
#: set a value: the whole config is loaded then)
SHORT_PATH_ENV = frozenset({"MEMMAN_SOCKET", "MEMMAN_DATA_DIR", "MEMMAN_CONFIG"})


def load_settings() -> Settings:
    """The socket, the data dir and ``[hooks]``: with no config file and no MEMMAN_* variable
    but the paths, the defaults without loading ``memman.config`` (its sections cost the
    agent tens of milliseconds on every event); else ``Config.load()``, checks included."""
    from memman import paths

    if not paths.config_path().exists() and not any(
            k.startswith("MEMMAN_") and k not in SHORT_PATH_ENV for k in os.environ):
        from memman.hook_config import HooksConfig

        return Settings(paths.socket_path()[0], paths.data_dir(), HooksConfig())
    from memman.config import Config

    cfg = Config.load()
    return Settings(cfg.socket, cfg.data_dir, cfg.hooks)


@dataclass
class Event:
    """The fields of a hook event memman reads."""

    name: str
    session_id: str
    cwd: str
    source: str = ""
    prompt: str = ""
    tool_name: str = ""
    tool_input: Any = None
    tool_response: Any = None
    tool_use_id: str = ""
    last_message: str | None = None
    transcript: str = ""

    @classmethod
    def of(cls, d: Any) -> Event:
        if not isinstance(d, dict):
            raise ValueError("the event is not a JSON object")
        name, sid = d.get("hook_event_name"), d.get("session_id")
        if not isinstance(name, str) or not isinstance(sid, str) or not sid:
            raise ValueError("the event has no hook_event_name or session_id")
        last = d.get("last_assistant_message")

        def text(key: str) -> str:
            v = d.get(key)
            return v if isinstance(v, str) else ""

        return cls(name=name, session_id=sid, cwd=text("cwd") or os.getcwd(),
                   source=text("source"), prompt=text("prompt"), tool_name=text("tool_name"),
                   tool_input=d.get("tool_input"), tool_response=d.get("tool_response"),
                   tool_use_id=text("tool_use_id"),
                   last_message=last if isinstance(last, str) else None,
                   transcript=text("transcript_path"))


@dataclass
class State:
    """What one conversation's hooks remember between their processes (a small file in the
    data dir): the entries already injected, the prompt of the exchange in progress."""

    path: Path
    injected: list[int] = field(default_factory=list)
    prompt: str = ""

    @classmethod
    def load(cls, data_dir: Path, session: str) -> State:
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in session)[:200]
        path = data_dir / STATE_DIR / f"{safe}.json"
        try:
            d = json.loads(path.read_text())
            return cls(path, [int(i) for i in d.get("injected", [])], str(d.get("prompt", "")))
        except (OSError, ValueError, TypeError, AttributeError):
            return cls(path)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"injected": self.injected[-5000:], "prompt": self.prompt}))
        os.replace(tmp, self.path)


# --- where the conversation belongs ---------------------------------------------------------


def project_of(cwd: str) -> str:
    """The git root of ``cwd`` (the nearest directory up with a ``.git``), else ``cwd``."""
    start = Path(os.path.realpath(cwd or "."))
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return str(d)
    return str(start)


def os_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER") or "default"


def session_name(agent: str, agent_session: str) -> str:
    """The memman session of one agent conversation: ``claude-code-<its session_id>``."""
    return f"{agent}-{agent_session}"


# --- the text the model reads ---------------------------------------------------------------


def one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def fit(header: str, lines: list[str], max_chars: int) -> str:
    """The header and as many whole lines as fit (in their order) under ``max_chars``
    characters, the final newline included; "" when no line fits."""
    out = header
    took = 0
    for line in lines:
        if len(out) + 1 + len(line) + 1 > max_chars - 1:  # strictly under the cap
            continue
        out += "\n" + line
        took += 1
    return out + "\n" if took else ""


def day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ts)) if ts else "undated"


def source_label(session_id: str) -> str:
    """Where a line came from, short: ``claude-code conversation 3f2a9c1e`` (a hook's session),
    else ``session NAME``."""
    for agent in AGENTS:
        if session_id.startswith(agent + "-"):
            return f"{agent} conversation {session_id[len(agent) + 1:][:8]}"
    return f"session {session_id[:40]}"


# --- the work ------------------------------------------------------------------------------


class Hook:
    """One event of one agent conversation, against the daemon."""

    def __init__(self, agent: str, event: Event, config: Settings, client: Rpc) -> None:
        self.agent, self.event, self.config, self.c = agent, event, config, client
        self.h: HooksConfig = config.hooks
        self.session = session_name(agent, event.session_id)
        self.user = self.h.user or os_user()
        self.project = project_of(event.cwd)
        self.state = State.load(config.data_dir, self.session)

    def open(self, session: str | None = None) -> dict[str, Any]:
        opts = {"user_id": self.user, "tenant_id": self.h.tenant, "agent": self.agent,
                "project": self.project, "recall_project": self.h.scope == "project"}
        return dict(self.c.session_open(session or self.session, opts))

    def add(self, entry: dict[str, Any]) -> None:
        """Log one entry; the session is opened first only when the daemon does not know it
        (a conversation whose SessionStart memman missed): one call, not two, per entry."""
        from memman.errors import SessionNotFound

        try:
            self.c.session_add(self.session, entry)
        except SessionNotFound:
            self.open()
            self.c.session_add(self.session, entry)

    def run(self) -> str:
        name = self.event.name
        if name == "SessionStart":
            return self.session_start()
        if name == "UserPromptSubmit":
            return self.prompt()
        if name == "PostToolUse":
            self.tool()
        elif name == "Stop":
            self.stop()
        return ""

    # SessionStart ---------------------------------------------------------------------
    def session_start(self) -> str:
        if self.open().get("created"):
            self.carry_exclusions()
        if self.event.source in ("compact", "clear"):
            return self.window() if self.h.inject_compact else ""
        return self.recap() if self.h.inject_start else ""

    def recap(self) -> str:
        lines: list[str] = []
        for type_ in ("semantic", "procedural"):
            recs = self.c.memory_list(self.user, type_, {"limit": 50})["records"]
            for r in recs:
                kind = r.get("kind")
                if kind == "preference":
                    value = r.get("value", r.get("content", ""))
                    text = f"preference {r.get('key') or ''}: {value}"
                elif kind == "rule":
                    text = f"rule: when {r.get('condition', '')}, {r.get('action', '')}"
                else:
                    continue
                lines.append(f"- {day(r.get('updated_at') or r.get('created_at') or 0)} "
                             f"(your {kind}s) {one_line(text)}")
        lines += self.agent_md_lines()
        mine = self.session
        rows = [o for o in self.c.session_list({"user_id": self.user, "tenant_id": self.h.tenant})
                if o["session_id"] != mine and o.get("agent") and o.get("project") == self.project]
        rows.sort(key=lambda o: -o.get("updated_at", 0))
        ids: dict[str, list[int]] = {}
        for o in rows[: self.h.recap_sessions]:
            st: dict[str, Any] = dict(self.c.session_get(o["session_id"], {"entries": False}))
            label = source_label(o["session_id"])
            for x in reversed(st.get("exchanges") or []):
                line = (f"- {day(x['at'])} ({label}) asked: {one_line(x['question'], 200)}"
                        f" — answered: {one_line(x['answer'], 450)}")
                lines.append(line)
                ids[line] = [i for i in (x.get("first_id"), x.get("last_id")) if i]
        text = fit(RECAP_HEADER, lines, self.h.max_chars)
        # what the recap quoted is not injected again by a prompt of this conversation
        shown = set(text.split("\n"))
        self.state.injected += [i for line, got in ids.items() if line in shown for i in got]
        self.state.save()
        return text

    def carry_exclusions(self) -> None:
        """A new conversation starts with the exclusions the project's earlier conversations
        hold (a line a person took out with ``d`` in the terminal app stays out of every later
        injection): for each (conversation, entry) the newest of ``recall_exclude`` /
        ``recall_include`` in the audit log decides."""
        mine = {o["session_id"] for o in self.c.session_list(
            {"user_id": self.user, "tenant_id": self.h.tenant})
            if o.get("agent") and o.get("project") == self.project}
        mine.discard(self.session)
        if not mine:
            return
        newest: dict[tuple[str, int], tuple[int, bool]] = {}
        for action in ("recall_exclude", "recall_include"):
            recs = self.c.audit_list({"user_id": self.user, "tenant_id": self.h.tenant,
                                      "action": action, "limit": 500})["records"]
            for r in recs:
                eid = (r.get("data") or {}).get("entry_id")
                sid = r.get("session_id") or ""
                if sid not in mine or not isinstance(eid, int):
                    continue
                if r["id"] > newest.get((sid, eid), (-1, False))[0]:
                    newest[(sid, eid)] = (r["id"], action == "recall_exclude")
        for eid in sorted({k[1] for k, (_id, out) in newest.items() if out}):
            try:
                self.c.recall_exclude(self.session, eid)
            except Exception as exc:  # an entry gone since: the others still carry over
                log(self.config.data_dir, f"{self.session}: exclusion of entry {eid} not "
                                          f"carried over: {exc}")

    def agent_md_lines(self) -> list[str]:
        """The tenant's agent.md chunks that bear on this project (its name as the query)."""
        name = Path(self.project).name
        if not name:
            return []
        try:
            hits = self.c.docs_search(self.h.tenant, name, {"limit": 3}).get("results") or []
        except Exception:  # no documents, or a daemon without them: the recap goes on
            return []
        return [f"- (agent.md of {self.h.tenant}) {one_line(h.get('text', ''))}"
                for h in hits if h.get("doc_id") == "agent.md" and h.get("text")]

    def window(self) -> str:
        """The budgeted window memman keeps for this conversation (after ``clear``, whose
        session is new: the agent's newest other conversation in this project)."""
        target = self.session
        if self.event.source == "clear":
            rows = [o for o in self.c.session_list({"user_id": self.user,
                                                    "tenant_id": self.h.tenant})
                    if o["session_id"] != self.session and o.get("agent") == self.agent
                    and o.get("project") == self.project and o.get("entries")]
            if not rows:
                return ""
            target = max(rows, key=lambda o: o.get("updated_at", 0))["session_id"]
        ans = self.c.session_context(target, {"max_tokens": max(256, self.h.max_chars // 3),
                                              "peek": True})
        lines = []
        parts = ans.get("parts") or []
        for i, m in enumerate(ans.get("messages") or []):
            content = m.get("content")
            if not isinstance(content, str) or not content.strip():
                continue
            date = (parts[i].get("date") if i < len(parts) else None) or ""
            for part in content.split("\n"):
                if part.strip():
                    lines.append(f"- {date + ' ' if date else ''}{m.get('role', '')}: "
                                 f"{one_line(part.removeprefix('- '))}")
        return fit(WINDOW_HEADER, lines, self.h.max_chars)

    # UserPromptSubmit -----------------------------------------------------------------
    def prompt(self) -> str:
        prompt = self.event.prompt
        self.state.prompt = prompt
        if self.h.capture and prompt.strip():
            self.add({"type": "message", "role": "user", "content": prompt})
        else:
            self.open()
        out = ""
        if self.h.inject_prompt and prompt.strip():
            out = self.recall(prompt)
        self.state.save()
        return out

    def recall(self, prompt: str) -> str:
        ans = self.c.session_context(self.session, {
            "query": prompt, "max_tokens": max(512, self.h.max_chars // 2), "peek": True})
        seen = set(self.state.injected)
        chosen: list[dict[str, Any]] = []
        for item in ans.get("recalled") or []:
            r: dict[str, Any] = dict(item)
            if r.get("note") == "replaced later" or r["entry_id"] in seen:
                continue
            if not self.relevant(r):
                continue
            chosen.append(r)
        if not chosen:
            return ""
        # the most relevant first (what is cut at the cap is the least relevant)
        chosen.sort(key=lambda r: -float(r.get("fused") or 0.0))
        lines, ids = [], []
        for r in chosen:
            who = "you" if r.get("role") == "user" else (r.get("role") or "")
            note = " (current)" if r.get("note") == "current" else ""
            lines.append(f"- {r.get('date') or day(r.get('at') or 0)} "
                         f"({source_label(r['session_id'])}){note} "
                         f"{who}: {one_line(r.get('text') or '')}")
            ids.append(r["entry_id"])
        text = fit(RECALL_HEADER, lines, self.h.max_chars)
        if text:
            kept = set(text.split("\n"))
            self.state.injected += [i for i, ln in zip(ids, lines, strict=True) if ln in kept]
        return text

    def relevant(self, r: dict[str, Any]) -> bool:
        """The relevance floor: the prompt's cosine, or a shared informative word and half of
        it."""
        cos = float(r.get("vector") or 0.0)
        floor = self.h.min_cosine
        return cos >= floor or (float(r.get("bm25") or 0.0) > 0 and cos >= floor / 2)

    # PostToolUse ----------------------------------------------------------------------
    def tool(self) -> None:
        e = self.event
        tools = self.h.tools
        if not e.tool_name or not ("*" in tools or e.tool_name in tools):
            return
        call_id = e.tool_use_id or f"call-{time.time_ns()}"
        args = json.dumps(e.tool_input if e.tool_input is not None else {},
                          ensure_ascii=False, default=str)
        result = e.tool_response
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False,
                                                                 default=str)
        cap = self.h.tool_result_max_chars
        meta: dict[str, Any] = {"agent": self.agent, "chars": len(text)}
        if len(text) > cap:
            meta["excerpt"] = True
            text = (text[: cap - 60] + f"\n… [excerpt: {cap - 60} of {len(text):,} characters, "
                    f"{len(text.encode()):,} bytes]")
        self.add({
            "type": "tool_call", "role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": e.tool_name, "arguments": args[:20_000]}}]})
        self.add({"type": "tool_result", "role": "tool", "tool_call_id": call_id,
                  "name": e.tool_name, "content": text, "metadata": meta})

    # Stop -----------------------------------------------------------------------------
    def stop(self) -> None:
        if not self.h.capture:
            return
        answer = self.event.last_message
        if answer is None:
            answer = last_answer(self.event.transcript)
        if not answer or not answer.strip():
            return
        self.add({"type": "message", "role": "assistant", "content": answer})
        if self.state.prompt:
            self.c.session_finalize(self.session, self.state.prompt, answer)
            self.state.prompt = ""
            self.state.save()


def last_answer(transcript: str) -> str:
    """The last assistant text of a JSONL transcript (Claude Code's and Codex's shapes)."""
    if not transcript:
        return ""
    try:
        with open(transcript, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TRANSCRIPT_TAIL))
            tail = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(tail):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        msg = d.get("message") if isinstance(d.get("message"), dict) else d.get("payload")
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        content = msg.get("content")
        if isinstance(content, str) and content.strip():
            return content
        if isinstance(content, list):
            texts = [c.get("text", "") for c in content
                     if isinstance(c, dict) and c.get("type") in ("text", "output_text")]
            if any(t.strip() for t in texts):
                return "\n".join(t for t in texts if t)
    return ""


# --- the process ---------------------------------------------------------------------------


def log(data_dir: Path | None, message: str) -> None:
    """One line in ``hooks.log`` (memman's data dir); a log that cannot be written is let go."""
    try:
        if data_dir is None:
            from memman import paths

            data_dir = paths.data_dir()
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOG_NAME
        if path.exists() and path.stat().st_size > LOG_MAX_BYTES:  # one older file is kept
            os.replace(path, path.with_name(LOG_NAME + ".1"))
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} {message}\n")
    except OSError:
        pass


class Rpc:
    """A blocking msgpack-rpc client of one connection, for one hook: the protocol's framing
    and nothing else (``memman.SyncClient`` brings every typed method, retries and events,
    which a hook does not use and which cost its start). ``rpc.session_open(...)`` calls
    ``memman_session_open``; a daemon error raises its ``MemmanError``."""

    def __init__(self, path: Path, timeout: float) -> None:
        import socket

        from memman import paths
        from memman.errors import ConnectionLost

        paths.check_socket_owner(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            self.sock.close()
            raise ConnectionLost(f"no memman daemon answers at {path}: {exc}") from None
        from memman.protocol import FrameDecoder

        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.next_id = 0

    def call(self, method: str, *params: Any) -> Any:
        from memman.errors import ConnectionLost, error_for
        from memman.protocol import Response, pack_request, parse

        self.next_id += 1
        self.sock.sendall(pack_request(self.next_id, method, list(params)))
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionLost(f"the daemon closed the connection during {method}")
            self.decoder.feed(data)
            for obj in self.decoder:
                msg = parse(obj)
                if not isinstance(msg, Response) or msg.msgid != self.next_id:
                    continue
                if msg.error is not None:
                    err = msg.error if isinstance(msg.error, (list, tuple)) else [-32603, msg.error]
                    raise error_for(int(err[0]), str(err[1]),
                                    err[2] if len(err) > 2 else None)
                return msg.result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *params: self.call(f"memman_{name}", *params)

    def close(self) -> None:
        self.sock.close()


def connect(config: Settings) -> Rpc:
    """A connection to the daemon; one is started (``[hooks] start_daemon``) when none
    answers."""
    from memman.errors import ConnectionLost

    timeout = config.hooks.request_timeout_s
    try:
        return Rpc(config.socket, timeout)
    except ConnectionLost:
        if not config.hooks.start_daemon:
            raise
    from memman.autostart import start_daemon

    start_daemon(config.socket, timeout=config.hooks.start_timeout_s)
    return Rpc(config.socket, timeout)


def main(argv: list[str] | None = None) -> int:
    """``memman hook AGENT``: exit 0 always; the injection (if any) on stdout."""
    argv = list(sys.argv[1:] if argv is None else argv)
    agent = argv[0] if argv else ""
    data_dir: Path | None = None
    started = time.monotonic()
    try:
        if agent not in AGENTS:
            raise ValueError(f"unknown agent {agent!r}; expected one of {', '.join(AGENTS)}")
        config = load_settings()
        data_dir = config.data_dir
        raw = sys.stdin.buffer.read(MAX_EVENT_BYTES + 1)
        if len(raw) > MAX_EVENT_BYTES:
            raise ValueError(f"the event is over {MAX_EVENT_BYTES:,} bytes")
        event = Event.of(json.loads(raw or b"null"))
        if event.name not in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
            return 0  # nothing to do: no connection
        client = connect(config)
        try:
            out = Hook(agent, event, config, client).run()
        finally:
            client.close()
        if out:
            assert len(out) < config.hooks.max_chars
            sys.stdout.write(out)
            sys.stdout.flush()
            src = f"({event.source})" if event.source else ""
            log(data_dir, f"{event.name}{src} {session_name(agent, event.session_id)}: "
                          f"injected {len(out)} characters, {out.count(chr(10)) - 1} lines")
    except BaseException as exc:  # noqa: BLE001 - a hook never fails its agent
        if isinstance(exc, KeyboardInterrupt):
            return 0
        log(data_dir, f"memman hook {agent}: gave up after {time.monotonic() - started:.2f}s: "
                      f"{type(exc).__name__}: {exc}")
    return 0
