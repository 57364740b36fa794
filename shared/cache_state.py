"""Tool-result cache helpers both sides use: the cache key and the "FUNCTION CACHE STATE" block.

The key is the design's: md5 of ``"{tool}:{json.dumps(params, sort_keys=True)}"``, so a client can
compute the key of a call without asking the daemon (e.g. to evict it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def cache_key(tool: str, params: dict[str, Any]) -> str:
    """The cache key of a tool call (hex md5 of tool and sorted-key JSON parameters)."""
    params_json = json.dumps(params, sort_keys=True)
    return hashlib.md5(f"{tool}:{params_json}".encode()).hexdigest()


def format_cache_state(entries: list[dict[str, Any]], now: float | None = None) -> str:
    """The block ``memman show`` prints, in the design's log shape::

        === FUNCTION CACHE STATE ===
        Cached functions: 2
          • gcs_get_champion_details({'champion_name': 'droideka'}): 2/3 exchanges remaining

    ``entries`` are the maps ``memman_cache_list`` returns. Entries with a wall-clock TTL also
    show the seconds left when ``now`` (unix seconds) is given.
    """
    lines = ["=== FUNCTION CACHE STATE ===", f"Cached functions: {len(entries)}"]
    for e in entries:
        line = (f"  • {e['tool_name']}({e['parameters']!r}): "
                f"{e['remaining_duration']}/{e['original_duration']} exchanges remaining")
        if e.get("expires_at") and now is not None:
            line += f", {max(0.0, e['expires_at'] - now):.0f}s of TTL left"
        lines.append(line)
    return "\n".join(lines)
