"""How informative a word is within one session: the share of its entries that hold it.

The window ranks by the recall index (``recall/index.py``: BM25 and vectors); what is left
here is the idf of a question's words over the session's own entries, which the fact lines of
a broad question weigh by (``window/summarize.py``). Kept next to the timeline (one count per
entry, from the words its analysis found) so a read never touches SQLite.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable


class DocFreq:
    """Entries counted, and per word the entries that hold it."""

    def __init__(self) -> None:
        self.n = 0
        self.df: Counter[str] = Counter()

    def add(self, words: Iterable[str]) -> None:
        """One entry's words (each counted once)."""
        self.n += 1
        self.df.update(set(words))

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5)) if df else 0.0
