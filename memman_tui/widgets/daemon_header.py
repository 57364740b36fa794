"""Daemon figures: clients, requests/s, database size, tokenizer encoding, summarizer,
embedder (with a re-embed's progress), the shared store, quarantined sessions."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from memman.labels import embeddings_label


def human_bytes(n: int | float) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def summarizer_label(stats: dict[str, Any]) -> str:
    """The LLM model and its calls when the summarizer can reach one, else "fallback"."""
    s = stats.get("summarizer")
    if not isinstance(s, dict):
        return "n/a"
    model = s.get("model") or "?"
    calls = s.get("calls", 0)
    fallbacks = s.get("fallbacks", 0)
    if s.get("available", True):
        return f"{model} · {calls} LLM calls · {fallbacks} fallbacks"
    return f"{model} (no key or endpoint: extractive fallback) · {fallbacks} fallbacks"


def shared_label(stats: dict[str, Any]) -> tuple[str, str] | None:
    """The shared store's state when the daemon uses PostgreSQL (None with SQLite only)."""
    s = stats.get("shared")
    if not isinstance(s, dict) or s.get("backend") != "postgresql":
        return None
    state = str(s.get("state") or "?")
    if state == "up":
        return "postgresql up", "bold green"
    retry = s.get("retry_in_s")
    return (f"postgresql {state.upper()} — reconnecting"
            + (f", retry in {retry:.1f}s" if isinstance(retry, (int, float)) else ""), "bold red")


def quarantine_label(stats: dict[str, Any]) -> str | None:
    """The sessions whose background compression failed and are left alone (None: none)."""
    q = (stats.get("session_engine") or {}).get("quarantined")
    if not isinstance(q, dict) or not q:
        return None
    names = sorted(str(k) for k in q)
    more = f" +{len(names) - 3}" if len(names) > 3 else ""
    return f"{len(names)} quarantined: {', '.join(names[:3])}{more} (memman status)"


class DaemonHeader(Static):
    """One line of daemon figures; requests/s is computed from two successive stats."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("connecting…", **kwargs)
        self._last: tuple[float, int] | None = None
        self.rate = 0.0

    def show_stats(self, stats: dict[str, Any] | None, now: float) -> None:
        if not stats:
            self.update(Text("daemon stats not available", "grey50"))
            return
        requests = int(stats.get("requests") or 0)
        if self._last is not None and now > self._last[0]:
            self.rate = max(0.0, (requests - self._last[1]) / (now - self._last[0]))
        self._last = (now, requests)
        tok = stats.get("tokenizer") or {}
        text = Text()
        for label, value in (
            ("clients", str(stats.get("clients", "-"))),
            ("req/s", f"{self.rate:.1f}"),
            ("sessions", str(stats.get("sessions", "-"))),
            ("db", human_bytes(stats.get("database_bytes") or 0)),
            ("tokenizer", str(tok.get("encoding", "-"))),
            ("summarizer", summarizer_label(stats)),
        ):
            text.append(f"{label} ", "grey62")
            text.append(value, "bold")
            text.append("   ")
        emb = stats.get("embeddings")
        if isinstance(emb, dict):  # the model in force, and a re-embed's progress while it runs
            running = (emb.get("reembed") or {}).get("state") == "running"
            text.append("embeddings ", "grey62")
            text.append(embeddings_label(emb, short=True), "bold yellow" if running else "bold")
            text.append("   ")
        shared = shared_label(stats)
        if shared is not None:
            text.append("shared ", "grey62")
            text.append(*shared)
            text.append("   ")
        quarantined = quarantine_label(stats)
        if quarantined is not None:
            text.append("sessions ", "grey62")
            text.append(quarantined, "bold red")
        self.update(text)
