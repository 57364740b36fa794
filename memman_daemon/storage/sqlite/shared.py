"""The shared store component when the shared tiers live in the local SQLite file."""

from __future__ import annotations

from typing import Any

from memman_daemon.component import Component


class LocalShared(Component):
    """The embedded default: the "shared" tiers live in the local SQLite file."""

    stats_key = "shared"
    backend = "sqlite"
    state = "local"

    def stats(self) -> dict[str, Any]:
        return {"backend": self.backend, "state": self.state}
