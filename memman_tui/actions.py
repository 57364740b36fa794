"""What a person changes from the TUI, each written once, through the backend.

Screens post a message for an action (``SessionScreen.Pin``, ``OverviewScreen.DeleteSessions``,
...); the app runs the matching method here in one worker (``MemmanApp.change``), so a failure
surfaces once, as a modal. Each method checks read-only mode and the connection first, asks
before destroying (``ask`` shows a dialog and waits for its answer) and says what it did
(``notify``). It answers True when the daemon's state may have changed: the app then clears the
marks and reloads the screen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.screen import Screen

from memman.errors import CONFLICT, NOT_FOUND, MemmanError
from memman_tui.backend import UNAVAILABLE
from memman_tui.feed import Feed
from memman_tui.rows import as_list
from memman_tui.screens.dialogs import ConfirmScreen, ConflictScreen, PromoteScreen

#: (entry id, pin it?, the part shown, is it a system entry?)
Pin = tuple[int, bool, Any, bool]


class Actions:
    """The TUI's changes. ``ask`` is the app's ``push_screen_wait`` (run inside a worker)."""

    def __init__(self, feed: Feed, ask: Callable[[Screen[Any]], Awaitable[Any]],
                 notify: Callable[..., None]) -> None:
        self.feed = feed
        self.ask = ask
        self.notify = notify

    # --- checks every change makes --------------------------------------------------------
    def can_change(self, what: str) -> bool:
        if self.feed.settings.read_only:
            self.notify(f"read-only mode: {what} is disabled (restart without --read-only)",
                        severity="warning")
            return False
        if self.feed.backend is None:
            self.notify(f"not connected: cannot {what} now", severity="error")
            return False
        return True

    def report(self, what: str, result: Any) -> bool:
        if result is UNAVAILABLE:
            self.notify(f"{what}: not available (the daemon does not offer it yet)",
                        severity="warning")
            return False
        return True

    # --- the actions ------------------------------------------------------------------------
    async def undo(self) -> bool:
        """Reverse this TUI's last pin, unpin, evict or promotion, through the daemon."""
        if not self.can_change("undo"):
            return False
        backend = self.feed.backend
        assert backend is not None
        try:
            result = await backend.undo({})
        except MemmanError as exc:
            if exc.code == NOT_FOUND:
                self.notify("nothing to undo: no pin, unpin, evict or promotion of this TUI "
                            "is left", severity="warning")
                return False
            raise
        if not self.report("undo", result):
            return False
        rec = result.get("undone") or {}
        self.notify(f"undid {rec.get('action', '?')} of {str(rec.get('what', ''))[:60]!r} "
                    f"({rec.get('source', '')})")
        return True

    async def exclude_recalled(self, session_id: str, entry_id: int, source: str) -> bool:
        """This session stops recalling an entry of an earlier session (audited; u undoes)."""
        if not self.can_change("exclude from recall"):
            return False
        backend = self.feed.backend
        assert backend is not None
        result = await backend.recall_exclude(session_id, entry_id)
        if not self.report("exclude from recall", result):
            return False
        self.notify(f"session {session_id} no longer recalls entry {entry_id} of session "
                    f"{source} (u undoes)")
        return True

    async def pin(self, session_id: str, pins: list[Pin]) -> bool:
        """Pin or unpin entries; pinning or unpinning a system entry asks first, naming its
        text."""
        if not self.can_change("pinning"):
            return False
        system = [(eid, pin, part) for eid, pin, part, is_sys in pins if is_sys]
        if system:
            lines = [f"{'pin' if pin else 'UNPIN'} entry {eid}: {_clip(part.text, 160)}"
                     for eid, pin, part in system]
            ok = await self.ask(ConfirmScreen(
                f"{'Unpin' if not system[0][1] else 'Pin'} a system entry of {session_id}?",
                "\n".join(lines) + ("\nAn unpinned system prompt can be folded into a summary "
                                    "by the next compaction. u undoes this." if
                                    any(not p for _e, p, _x in system) else "")))
            if not ok or self.feed.backend is None:
                return False
        backend = self.feed.backend
        assert backend is not None
        for entry_id, pinned, _part, _sys in pins:
            result = await backend.session_pin(session_id, entry_id, pinned)
            if not self.report("pin", result):
                return False
        verb = "pinned" if pins[0][1] else "unpinned"
        self.notify(f"{verb} entr{'y' if len(pins) == 1 else 'ies'} "
                    f"{', '.join(str(p[0]) for p in pins)} (u undoes)")
        return True

    async def compact(self, session_ids: list[str]) -> bool:
        if not self.can_change("compaction"):
            return False
        backend = self.feed.backend
        assert backend is not None
        lines = []
        for sid in session_ids[:5]:
            preview = await backend.session_preview(sid)
            plan = preview.get("compaction") if isinstance(preview, dict) else None
            ids = list(plan.get("entry_ids") or []) if isinstance(plan, dict) else []
            got = await backend.session_get(sid, {"limit": 400})
            texts = {e.get("id"): e for e in as_list(got, "entries")}
            lines.append(f"{sid}: {len(ids)} entries would fold into one summary"
                         + "".join(f"\n  #{i} {_clip(str(texts.get(i, {}).get('content') or ''), 90)}"
                                   for i in ids[:3]))
        ok = await self.ask(ConfirmScreen(
            f"Compact {len(session_ids)} session(s) now?",
            "\n".join(lines) + "\nThe originals stay in the log and can be expanded."))
        backend = self.feed.backend  # the connection may have been re-made meanwhile
        if not ok or backend is None:
            return False
        done, saved, reasons = 0, 0, set()
        for sid in session_ids:
            result = await backend.session_compact(sid)
            if not self.report("compact", result):
                return False
            if isinstance(result, dict) and result.get("summary") is None:
                reasons.add(str(result.get("reason") or "nothing to compact"))
                continue
            done += 1
            if isinstance(result, dict):
                saved += int(result.get("tokens_saved") or 0)
        if done:
            self.notify(f"compacted {done} session(s), {saved:,} tokens saved")
        for reason in reasons:
            self.notify(f"not compacted: {reason}", severity="warning")
        return True

    async def evict(self, session_id: str, tier: str, keys: list[Any],
                    labels: list[str] | None = None) -> bool:
        if not self.can_change("eviction"):
            return False
        what = "cache entr(ies)" if tier == "cache" else "scratchpad snippet(s)"
        named = "\n".join(f"  {_clip(label, 200)}" for label in (labels or map(str, keys)))
        ok = await self.ask(ConfirmScreen(
            f"Evict {len(keys)} {what} from {session_id}?",
            f"{named}\nu undoes the eviction (the audit log keeps the item)."))
        backend = self.feed.backend
        if not ok or backend is None:
            return False
        for key in keys:
            if tier == "cache":
                result = await backend.cache_evict(session_id, key)
            else:
                result = await backend.scratchpad_evict(session_id, _snippet_key(key))
            if not self.report("evict", result):
                return False
        self.notify(f"evicted {len(keys)} {what}")
        return True

    async def delete(self, session_ids: list[str]) -> bool:
        if not self.can_change("deleting sessions"):
            return False
        rows = []
        for sid in session_ids:
            ov = self.feed.live.sessions.get(sid, {})
            rows.append(f"  {sid}: user {ov.get('user_id', '-')}, {ov.get('entries', '?')} "
                        f"entries, {ov.get('exchanges', '?')} exchanges")
        ok = await self.ask(ConfirmScreen(
            f"Delete {len(session_ids)} session(s)?",
            "\n".join(rows) + "\nTheir entries, summaries and cache are removed for good "
            "(this cannot be undone)."))
        backend = self.feed.backend
        if not ok or backend is None:
            return False
        for sid in session_ids:
            await backend.session_delete(sid)
        self.notify(f"deleted {len(session_ids)} session(s)")
        return True

    async def promote(self, session_id: str, snippets: list[dict[str, Any]]) -> bool:
        if not self.can_change("promotion"):
            return False
        choice = await self.ask(PromoteScreen(snippets))
        backend = self.feed.backend
        if not choice or backend is None:
            return False
        target, opts = choice
        done = 0
        for snippet in snippets:
            sid_key = _snippet_key(snippet["snippet_id"])
            try:
                result = await backend.scratchpad_promote(session_id, sid_key, target, opts)
            except MemmanError as exc:
                if exc.code != CONFLICT:
                    raise
                data = exc.data if isinstance(exc.data, dict) else {}
                key = data.get("key") or data.get("condition") or data.get("flow") or sid_key
                answer = await self.ask(ConflictScreen(
                    str(key), data.get("existing", "(the daemon did not send it)"),
                    data.get("proposed", snippet.get("text", "?")), exc.message))
                if answer != "overwrite":
                    self.notify(f"kept the existing value of {key!r}")
                    continue
                result = await backend.scratchpad_promote(session_id, sid_key, target,
                                                          {**opts, "replace": True})
            if not self.report("promote", result):
                return False
            done += 1
        if done:
            self.notify(f"promoted {done} snippet(s) to {target}")
        return True


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _snippet_key(key: Any) -> Any:
    """Row keys are strings; snippet ids may be ints on the wire."""
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return key
