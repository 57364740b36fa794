"""The LLM summarizer: the real ``openai`` async client, with a deterministic fallback.

Configuration comes from ``[llm]``: ``base_url`` (else ``OPENAI_BASE_URL``), ``model``, the name of
the variable holding the key (``api_key_env``, default ``OPENAI_API_KEY``) and ``timeout_s``.
Without a key, on an HTTP error, a timeout, malformed output, or in emergency mode the caller
gets the compression design's deterministic fallback summary and the work goes on.

No agent request waits past a deadline for the LLM: ``summarize_*`` take ``deadline`` seconds;
when it passes the caller gets the fallback at once while the call finishes in the background,
and ``on_late`` (if given) receives the LLM text when it arrives. Calls, tokens, latency and
failures are counted for ``memman_stats`` (key ``summarizer``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memman_daemon.component import Component
from memman_daemon.engine import extractive

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.engine.facts import Candidate
    from memman_daemon.model import Entry
    from memman_daemon.tokens import TokenCounter

log = logging.getLogger(__name__)

PROMPT = """Summarize the following conversation, preserving:
1. Key topics discussed
2. Important decisions made
3. Tools used and their outcomes
4. Any errors or issues encountered
5. Open tasks and the context needed to continue
Copy every value verbatim: identifiers, numbers, dates, names, paths, settings, user
instructions. Where a later message changed a value, keep only the current value.
Keep the summary concise but informative, at most about {target} tokens. Answer with the summary text only.
{notes}
{content}"""

TEXT_PROMPT = """Condense the following text to at most about {target} bytes, preserving topics,
decisions, tools and their outcomes, errors and open tasks. Copy values verbatim (identifiers,
numbers, dates, names, paths, instructions); where a value was changed later keep only the
current one. Answer with the condensed text only.
{notes}
{content}"""


class SummaryFailed(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


# --- the deterministic fallback: extractive (see ``extractive``) --------------------------------
def fallback_summary(entries: list[Entry], target_tokens: int = 150,
                     measure: Callable[[str], int] | None = None,
                     known: Mapping[int, list[Candidate]] | None = None) -> str:
    """A header line (counts, tools, errors), then the fact-carrying sentences and lines of
    ``entries`` verbatim, within about ``target_tokens`` (``measure`` counts; default ~4 chars
    per token)."""
    return extractive.summarize_entries(entries, target_tokens, measure or _approx_tokens,
                                        known=known)


def _approx_tokens(text: str) -> int:
    return len(text) // 4 + 1


def _bytes(text: str) -> int:
    return len(text.encode())


def truncate_bytes(text: str, target: int, *, keep: str = "head") -> str:
    """Cut ``text`` to about ``target`` UTF-8 bytes at a word boundary, marking the cut."""
    data = text.encode()
    if len(data) <= target:
        return text
    if keep == "head":
        cut = data[: max(target - 4, 0)].decode(errors="ignore")
        space = cut.rfind(" ")
        if space > len(cut) // 2:
            cut = cut[:space]
        return cut.rstrip() + " ..."
    cut = data[len(data) - max(target - 4, 0):].decode(errors="ignore")
    nl = cut.find("\n")
    if 0 <= nl < len(cut) // 2:
        cut = cut[nl + 1:]
    return "... " + cut.lstrip()


def render_for_prompt(entries: list[Entry], per_entry_chars: int = 500) -> str:
    out = []
    for e in entries:
        label = e.role if not e.name else f"{e.role}:{e.name}"
        text = e.content
        if e.tool_calls:
            text += " " + ", ".join(f"{c['function']['name']}({c['function']['arguments']})"
                                    for c in e.tool_calls)
        out.append(f"{label}: {text[:per_entry_chars]}")
    return "\n".join(out)


class Summarizer(Component):
    """The daemon's LLM client for summaries, with its extractive fallback and counters."""

    stats_key = "summarizer"

    def __init__(self, config: Config, tokens: TokenCounter) -> None:
        self.cfg = config.llm
        self.tokens = tokens
        #: set by the app once the scratchpad exists: a session's snippet texts, which the
        #: summary prompt quotes as the agent's own notes
        self.notes: Callable[[str], list[str]] | None = None
        self._client: Any = None
        self._client_settings: tuple[Any, ...] = ()
        self._retired: list[Any] = []  #: clients replaced after a config reload
        self._sem = asyncio.Semaphore(max(1, self.cfg.max_concurrent))
        self._tasks: set[asyncio.Task] = set()
        self.counters: dict[str, float] = {
            "calls": 0, "ok": 0, "failures": 0, "timeouts": 0, "http_errors": 0,
            "malformed": 0, "other_errors": 0, "fallbacks": 0, "no_key": 0, "emergency_skips": 0,
            "deadline_missed": 0, "late_results": 0, "prompt_tokens": 0, "completion_tokens": 0,
            "latency_total_s": 0.0, "latency_max_s": 0.0,
        }
        self.last_error = ""

    # --- configuration ---------------------------------------------------------------
    def api_key(self) -> str:
        return os.environ.get(self.cfg.api_key_env or "OPENAI_API_KEY", "")

    def base_url(self) -> str | None:
        return self.cfg.base_url or os.environ.get("OPENAI_BASE_URL") or None

    @property
    def available(self) -> bool:
        return bool(self.cfg.enabled and self.api_key())

    def client(self) -> Any:
        """The openai client for the current settings (a config reload may change them)."""
        settings = (self.api_key(), self.base_url(), self.cfg.timeout_s, self.cfg.max_retries)
        if self._client is None or settings != self._client_settings:
            import openai

            old, self._client_settings = self._client, settings
            self._client = openai.AsyncOpenAI(api_key=settings[0], base_url=settings[1],
                                              timeout=settings[2], max_retries=settings[3])
            if old is not None:  # calls still running on it may finish; closed at stop
                self._retired.append(old)
        return self._client

    # --- component lifecycle -----------------------------------------------------------
    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in [*self._retired, *([self._client] if self._client else [])]:
            try:
                await client.close()
            except Exception:  # closing a half-open HTTP pool must not stop shutdown
                log.debug("closing the openai client failed", exc_info=True)
        self._client, self._retired = None, []

    def stats(self) -> dict[str, Any]:
        c: dict[str, Any] = dict(self.counters)
        c["latency_mean_s"] = round(c["latency_total_s"] / c["ok"], 4) if c["ok"] else 0.0
        c["latency_total_s"] = round(c["latency_total_s"], 4)
        c["latency_max_s"] = round(c["latency_max_s"], 4)
        c.update(model=self.cfg.model, base_url=self.base_url() or "https://api.openai.com/v1",
                 available=self.available, enabled=bool(self.cfg.enabled), in_flight=len(self._tasks), last_error=self.last_error)
        return c

    # --- the call ------------------------------------------------------------------
    async def complete(self, prompt: str, max_tokens: int) -> str:
        """One chat completion; raises SummaryFailed (counted) on any failure."""
        import openai

        async with self._sem:
            self.counters["calls"] += 1
            t0 = time.monotonic()
            try:
                resp = await self.client().chat.completions.create(
                    model=self.cfg.model, messages=[{"role": "user", "content": prompt}],
                    max_tokens=max_tokens, temperature=self.cfg.temperature)
                text = _extract(resp)
            except SummaryFailed as exc:
                self._fail("malformed", str(exc))
                raise
            except openai.APITimeoutError as exc:
                self._fail("timeouts", str(exc))
                raise SummaryFailed("timeout", str(exc)) from exc
            except openai.APIStatusError as exc:
                self._fail("http_errors", f"HTTP {exc.status_code}")
                raise SummaryFailed("http", str(exc.status_code)) from exc
            except (openai.APIResponseValidationError, ValueError, TypeError, AttributeError) as exc:
                self._fail("malformed", repr(exc)[:200])
                raise SummaryFailed("malformed", repr(exc)[:200]) from exc
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._fail("other_errors", repr(exc)[:200])
                raise SummaryFailed("error", repr(exc)[:200]) from exc
            dt = time.monotonic() - t0
            self.counters["ok"] += 1
            self.counters["latency_total_s"] += dt
            self.counters["latency_max_s"] = max(self.counters["latency_max_s"], dt)
            usage = getattr(resp, "usage", None)
            if usage is not None:
                self.counters["prompt_tokens"] += int(getattr(usage, "prompt_tokens", 0) or 0)
                self.counters["completion_tokens"] += int(getattr(usage, "completion_tokens", 0) or 0)
            return text

    def count_fallback(self, why: str | None) -> None:
        """A fallback summary made without asking the LLM: why = "emergency" / "no_key"
        (None: the LLM is asked in the background and its answer replaces this one later)."""
        if why is None:
            return
        self.counters["fallbacks"] += 1
        self.counters["emergency_skips" if why == "emergency" else "no_key"] += 1

    def _fail(self, key: str, detail: str) -> None:
        self.counters["failures"] += 1
        self.counters[key] += 1
        self.last_error = f"{key}: {detail}"
        log.info("LLM summary failed (%s): %s", key, detail)

    async def _bounded(self, prompt: str, max_tokens: int, fallback: str,
                       deadline: float | None, emergency: bool,
                       on_late: Callable[[str], Any] | None) -> tuple[str, str]:
        if emergency or not self.available:
            self.count_fallback("emergency" if emergency else "no_key")
            return fallback, "fallback"
        task = asyncio.create_task(self.complete(prompt, max_tokens))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            if deadline is None:
                text = await task
            else:
                text = await asyncio.wait_for(asyncio.shield(task), deadline)
            return text, "llm"
        except TimeoutError:
            self.counters["deadline_missed"] += 1
            self.counters["fallbacks"] += 1
            if on_late is not None:
                task.add_done_callback(lambda t: self._deliver_late(t, on_late))
            return fallback, "fallback"
        except SummaryFailed:
            self.counters["fallbacks"] += 1
            return fallback, "fallback"

    def _deliver_late(self, task: asyncio.Task, on_late: Callable[[str], Any]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        self.counters["late_results"] += 1
        try:
            res = on_late(task.result())
            if asyncio.iscoroutine(res):
                t = asyncio.ensure_future(res)
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
        except Exception:
            log.exception("applying a late LLM summary failed")

    # --- what callers use ------------------------------------------------------------
    async def summarize_entries(self, entries: list[Entry], *, target_tokens: int,
                                session_id: str | None = None, deadline: float | None = None,
                                emergency: bool = False,
                                on_late: Callable[[str], Any] | None = None,
                                known: Mapping[int, list[Candidate]] | None = None,
                                fallback: str | None = None) -> tuple[str, str]:
        """Summarize log entries; returns (text, "llm" | "fallback"). ``known``: the entries'
        fact candidates where already found (the fallback then does not analyse them again);
        ``fallback``: the extractive summary, where the caller made it already."""
        if fallback is None:
            fallback = self.extractive(entries, target_tokens, known)
        if emergency or not self.available:
            return await self._bounded("", 0, fallback, deadline, emergency, on_late)
        notes = self._scratchpad_notes(session_id)
        prompt = PROMPT.format(target=max(target_tokens, 16), notes=notes,
                               content=render_for_prompt(entries))
        return await self._bounded(prompt, max(target_tokens, 16), fallback, deadline, emergency,
                                   on_late)

    async def condense_text(self, text: str, *, target_bytes: int, keep: str = "head",
                            session_id: str | None = None, deadline: float | None = None,
                            emergency: bool = False,
                            on_late: Callable[[str], Any] | None = None) -> tuple[str, str]:
        """Condense free text (an answer, the rolling summary) to about ``target_bytes``."""
        fallback = extractive.condense(text, target_bytes, _bytes)
        prompt = TEXT_PROMPT.format(target=target_bytes, content=text,
                                    notes=self._scratchpad_notes(session_id))
        out, source = await self._bounded(prompt, max(target_bytes // 3, 16), fallback, deadline,
                                          emergency, on_late)
        if source == "llm" and len(out.encode()) > target_bytes * 1.25:
            out = truncate_bytes(out, target_bytes, keep=keep)
        return out, source

    def extractive(self, entries: list[Entry], target_tokens: int,
                   known: Mapping[int, list[Candidate]] | None = None) -> str:
        """The summary made without the LLM (what the LLM's summary falls back to)."""
        return fallback_summary(entries, max(target_tokens, 16), self._measure, known)

    def _measure(self, text: str) -> int:
        return self.tokens.count_text(text, self.cfg.model)

    def _scratchpad_notes(self, session_id: str | None) -> str:
        """The session's scratchpad snippets (the three-tier design: MM's summaries can use its insights)."""
        if not session_id or self.notes is None:
            return ""
        snippets = [str(s) for s in self.notes(session_id)][:16]
        if not snippets:
            return ""
        return ("\nNotes the agent kept (scratchpad):\n"
                + "\n".join(f"- {s}" for s in snippets) + "\n")


def _extract(resp: Any) -> str:
    choices = getattr(resp, "choices", None)
    if not choices:
        raise SummaryFailed("malformed", "no choices in the response")
    msg = getattr(choices[0], "message", None)
    text = getattr(msg, "content", None)
    if not isinstance(text, str) or not text.strip():
        raise SummaryFailed("malformed", "empty or missing message content")
    return text.strip()
