"""``[hooks]``: what a coding agent's hooks capture and inject (``memman hook``). Its own
module, so that a hook with no config file to read starts without building every section of
``memman.config`` (which owns the loading and the checks; this class is one of its sections)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HooksConfig:
    """``memman hook AGENT``: what a coding agent's hooks capture and inject
    (docs/integrations.md)."""

    #: the user the conversations belong to ("" = the OS user running the agent)
    user: str = ""
    tenant: str = "default"
    #: whose conversations an injection draws on: "project" (the same project's only; the
    #: user's preferences and rules everywhere) or "user" (all of the user's)
    scope: str = "project"
    #: log the prompts and final answers (false: no message is captured)
    capture: bool = True
    #: the tools whose calls and results are logged: names, "*" for every one, [] for none
    tools: list[str] = field(default_factory=lambda: ["*"])
    #: characters of a tool result stored; a longer one is kept as an excerpt and its size
    tool_result_max_chars: int = 2000
    #: what is injected: the recap at start, the recall per prompt, the window after
    #: compact / clear
    inject_start: bool = True
    inject_prompt: bool = True
    inject_compact: bool = True
    #: most characters of one injected text, counted on what is printed (at most 9500: the
    #: agents cut a hook's text at about 10,000)
    max_chars: int = 9000
    #: the relevance floor of a per-prompt injection: a recalled line needs this cosine to
    #: the prompt, or a shared informative word and half of it
    min_cosine: float = 0.35
    #: earlier conversations of the project whose exchanges the start recap quotes
    recap_sessions: int = 5
    #: start a daemon when none answers (as ``memman mcp`` does); false: give up at once
    start_daemon: bool = True
    #: most seconds a hook waits for a daemon it started (then it gives up, exit 0)
    start_timeout_s: float = 20.0
    #: most seconds one hook waits for the daemon's answer to one request
    request_timeout_s: float = 10.0
