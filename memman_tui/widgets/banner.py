"""The banner strip: disconnected / reconnecting, paused, read-only. Hidden when all is well."""

from __future__ import annotations

from textual.widgets import Static


class Banner(Static):
    """Shows the app's connection, pause and read-only state (kept current by the app)."""

    def show_state(self, *, connection: str, paused: bool, read_only: bool) -> None:
        parts = []
        if connection:
            parts.append(connection)
        if paused:
            parts.append("⏸ PAUSED — live updates held; press z to resume")
        if read_only:
            parts.append("read-only: changes are disabled")
        self.set_class(bool(connection), "-disconnected")
        self.set_class(paused, "-paused")
        self.display = bool(parts)
        self.update("  │  ".join(parts))


class RateLabel(Static):
    """The refresh interval, always visible (`+` / `-` change it), and whether live is paused."""

    def show_rate(self, seconds: float, paused: bool) -> None:
        self.update("⏸ paused" if paused else f"⟳ {seconds:g}s  +/-")
