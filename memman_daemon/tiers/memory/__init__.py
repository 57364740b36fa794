"""User memory (the three-tier and four-layer designs): working, episodic, semantic and
procedural layers, written once over the ``memories`` table group (``storage/memories.py``).

- **working** is the session scratchpad (``tiers/scratchpad.py``); through this API it is
  appended to, searched (the four-layer design's term scoring), compacted and cleared for one
  user's sessions.
- **episodic** (``episodic.py``): searchable past events, found by full text and vectors.
- **semantic** and **procedural** (``keyed.py``): preferences (key -> value), rules
  (condition -> action) and playbooks (flow, slots, tool_calls, outcome, user_query), one
  live record per key, kept in a read-through cache (``cache.py``).

Search (``search.py``) ranks with the store's full text plus the four-layer design's recency
bonus; with embeddings it is hybrid (see docs/tiers.md). Compaction archives older entries
behind a summary entry instead of deleting them; only ``forget`` and ``clear`` delete.
``service.py``'s ``UserMemory`` is the component the rest of the daemon uses.
"""

from memman_daemon.storage.memories import MemoryRecord
from memman_daemon.tiers.memory.core import MEMORY_TYPES, STORED_TYPES, Change
from memman_daemon.tiers.memory.service import UserMemory

__all__ = ["MEMORY_TYPES", "STORED_TYPES", "Change", "MemoryRecord", "UserMemory"]
