"""The words of a text, as every retriever and the context window compare them: lower-cased,
lightly stemmed, stop words out, identifiers also split into their parts. One tokenizer for the
recall index's BM25, the window's relevance and supersession, and the fact lines."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

_WORD = re.compile(r"[A-Za-z0-9]+")
#: the most of a question (``opts.query``, a search's query, the newest user message) that is
#: ranked: a pasted megabyte is ranked by its head and its tail, so a request's cost is capped
#: whatever its size (the text itself is stored and sent whole)
QUERY_MAX_CHARS = 4000
#: any script's words, as full-text queries and the term scores of memory, documents and the
#: scratchpad split them (``words``)
_ANY_WORD = re.compile(r"\w+", re.UNICODE)
#: the one stop list: words that carry no topic (they match a random share of any corpus,
#: which fusion would then reward for appearing in both lists)
STOPWORDS = frozenset("""a an and are as at be but by can could did do does for from had has have
he her hers him his how i if in into is it its just me my no not of on or our ours she so than
that the their them then there these they this those to too up was we were what when where which
who whom why will with would you your yours yes ok okay please thanks thank also about any all
some been being here more most very let lets us one get got""".split())


def words(text: str) -> list[str]:
    """The lower-cased words of any script, in order, unstemmed (what a full-text index and
    a term score compare)."""
    return _ANY_WORD.findall(text.lower())


@lru_cache(maxsize=65536)  # words repeat: most of a log's words are seen before
def stem(w: str) -> str:
    """A light suffix stripper: deploy / deploys / deployed / deploying / deployment meet."""
    for suf in ("ments", "ment", "ings", "ing", "ers", "er", "ions", "ion", "ies", "ed", "es",
                "ly", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            w = w[: -len(suf)] + ("y" if suf == "ies" else "")
            break
    return w


#: a camelCase or PascalCase identifier (``BenchmarkSlidingAllow``, ``parseHTTPHeader``)
_CAMEL_HINT = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed words (identifiers also split into their parts: ``snake_case`` and
    ``a.b`` by the word pattern, ``camelCase`` here, so "benchmark" finds
    ``BenchmarkSlidingAllow``), no stop words."""
    out: list[str] = []
    of = _terms_of
    for w in _WORD.findall(text):
        got = of(w)
        if got:
            out.extend(got)
    return out


@lru_cache(maxsize=65_536)  # a word's terms, once: most of a log's words are seen before
def _terms_of(w: str) -> tuple[str, ...]:
    out = []
    lw = w.lower()
    if len(lw) >= 2 and lw not in STOPWORDS:
        out.append(stem(lw))
    if not w.islower() and _CAMEL_HINT.search(w):
        for part in _CAMEL_PART.findall(w):
            lp = part.lower()
            if len(lp) >= 2 and lp not in STOPWORDS and lp != lw:
                out.append(stem(lp))
    return tuple(out)


#: bytes of an ASCII-encoded text: a word's character stays, any other becomes a space (what
#: ``_WORD`` splits on); 0xFF, which no ASCII text holds, stays too: it marks where a text ends
_SPLIT = bytes(c if 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 0xFF else 32
               for c in range(256))
_END = b"\xff"
#: words kept by ``_Numbered`` (one call may add more; the next one starts afresh): ~3 MB
#: that stay after the start (a log's common words are most of its words)
NUMBERED_WORDS = 16_384


NONE, MANY = -3, -2  #: ``_Numbered``: a word of no term (a stop word), of several


class _Numbered(dict[bytes, int]):
    """A word (ASCII bytes) -> the number of its one term, ``NONE`` when it has none (a stop
    word, one letter), ``MANY`` when it has several (a camelCase identifier: their numbers in
    ``many``), filled as words are met; ``names`` the terms by number. ``_END`` is -1. One
    number a word, not a tuple: the words of a start are looked up straight into an array."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.many: dict[bytes, tuple[int, ...]] = {}
        self._number: dict[str, int] = {}
        self[_END] = -1

    def __missing__(self, w: bytes) -> int:
        out = []
        for t in _terms_of(w.decode("ascii")):
            n = self._number.get(t)
            if n is None:
                n = self._number[t] = len(self.names)
                self.names.append(t)
            out.append(n)
        got = self[w] = out[0] if len(out) == 1 else NONE if not out else MANY
        if got == MANY:
            self.many[w] = tuple(out)
        return got


_numbered = _Numbered()


def numbered_terms(texts: list[str], limit: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``terms`` of many texts at once, as numbers (a start indexes every entry: ``terms``
    a text at a time was a regex call and a cache lookup per word in Python, here the words
    are split and looked up in C): each text's first ``limit`` terms' numbers in order, all
    texts' one after another (int64); each text's count; the terms by number (valid until
    the next call). The same terms as ``terms`` of each text: its words are ASCII letter and
    digit runs, so the text is read as ASCII with every other character a space."""
    global _numbered
    if not texts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    if len(_numbered) > NUMBERED_WORDS:
        _numbered = _Numbered()
    table = _numbered
    # each text's words, then the end mark: the words of all texts split in one call
    joined = b" \xff ".join([t.encode("ascii", "replace") for t in texts] + [b""])
    split = joined.translate(_SPLIT).split()
    got = np.fromiter(map(table.__getitem__, split), dtype=np.int64, count=len(split))
    many = np.flatnonzero(got == MANY)
    if len(many):  # words of several terms: each takes the room of its terms
        sizes = np.where(got == NONE, 0, 1)
        parts = [table.many[split[i]] for i in many.tolist()]
        sizes[many] = [len(t) for t in parts]
        at = np.cumsum(sizes) - sizes
        flat = np.empty(int(sizes.sum()), dtype=np.int64)
        one = sizes == 1
        flat[at[one]] = got[one]
        for a, t in zip(at[many].tolist(), parts, strict=True):
            flat[a:a + len(t)] = t
    else:
        flat = got[got != NONE]
    ends = np.flatnonzero(flat < 0)  # one a text
    starts = np.concatenate(([0], ends[:-1] + 1))
    counts = ends - starts
    if counts.size and counts.max() > limit:  # a text's first ``limit`` terms only
        keep = np.ones(len(flat), dtype=bool)
        keep[ends] = False
        for s, n in zip(starts[counts > limit].tolist(), counts[counts > limit].tolist(),
                        strict=True):
            keep[s + limit:s + n] = False
        return flat[keep], np.minimum(counts, limit), table.names
    return np.delete(flat, ends), counts, table.names


def excerpt(text: str, limit: int = QUERY_MAX_CHARS) -> str:
    """A text too long to rank whole, as its head and its tail (where a pasted log or
    document usually carries the question), each cut at a space; ``text`` itself when short."""
    if len(text) <= limit:
        return text
    half = limit // 2
    head, tail = text[:half], text[-half:]
    cut = head.rfind(" ", half // 2)
    head = head[:cut] if cut > 0 else head
    cut = tail.find(" ", 0, half // 2)
    tail = tail[cut + 1:] if cut >= 0 else tail
    return f"{head} … {tail}"
