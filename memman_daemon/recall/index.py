"""The recall index: every entry of a user's sessions, indexed as it arrives, so that any
session's window (and memory search) finds what any of them said.

One *corpus* per scope (the user within their tenant; the tenant when ``[recall] scope`` is
"tenant"): rows in arrival order, each an entry with its session, time and role, a BM25 row
(``search/bm25.py``) and a vector of the search model (MiniLM by default). Vectors are
computed in the background, in batches in a worker thread, and written to
``recall_vectors`` so that a restart does not re-embed; while a row's vector is pending the
static model (microseconds a text) stands in for it, and the answer says so.

Storage (``storage/recall.py``, chosen by ``backend_for``): the vectors and exclusions are kept
there, and with a shared store the index hands it each entry it indexes (off the add path)
and takes in the rows other daemons' sessions logged (``_changed``): with ``[storage]
shared``, a user's recall spans hosts. Another daemon's entry has its own id here
(``REMOTE_BASE`` + its shared row's id) and names its session on that host.

``retrieve`` is the one retriever: BM25 and cosine rankings fused by reciprocal rank fusion
(``search/hybrid.py``'s ``rrf_dense``: the fusion memory and docs search use), over the rows of one session and of the scope's other
sessions alike. The window (``engine/window``) and ``memman_memory_search`` (type
``session``) call it; deleting a session or an entry removes its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
import time
import weakref
from array import array
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.background import SLICE_S, release_memory
from memman_daemon.changes import Changes
from memman_daemon.component import Component, stop_task
from memman_daemon.model import Entry
from memman_daemon.recall import updates
from memman_daemon.scope import Caller, across_mask, corpus_key, session_owner
from memman_daemon.search import core, late
from memman_daemon.search.words import STOPWORDS, numbered_terms
from memman_daemon.search.words import terms as text_terms
from memman_daemon.search.words import words as said_words
from memman_daemon.storage.recall import Change, Forgotten, RemoteRow

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.background import BackgroundShare
    from memman_daemon.model import Session
    from memman_daemon.search.embed_queue import EmbeddingQueue
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.storage.recall import RecallStorage

log = logging.getLogger(__name__)

STATIC_PER_REQUEST = 2000  #: stand-in vectors one request computes at most, in a thread
STATIC_INLINE = 64  #: ...and on the event loop (rows that arrived while it waited)
#: ...and as few as this are computed on the event loop before it (~0.2 ms for one short
#: text, ~0.6 ms for 16: a worker thread's hop cost ~1 ms more, on every new question)
STATIC_ON_LOOP = 16
QUERY_CACHE = 256  #: query vectors kept
#: questions whose cosines against a corpus are kept (``_cosines``): a question asked again
#: (the next context of the same exchange) costs the rows that changed, not the whole matrix
COSINE_CACHE = 16  #: (a question's facets are up to 13 vectors)
#: questions (facets) whose every row's BM25 is kept (``_lexical``: 0.4 MB each at 100k rows)
LEXICAL_CACHE = 8
ASKED_KEPT = 8  #: questions' search-model passes kept for the entry of the same text
#: ...and their MaxSim terms against the rows scored (``late.Kept``): the widening of the
#: 4-bit token vectors and their products were the largest part of a repeated question's
#: read; at most this many floats a question (1 MB; 16 MB for ``COSINE_CACHE`` questions)
KEPT_FLOATS = 1 << 18
KNOWN_TEXTS = 100_000  #: texts remembered with the row that holds their vector
#: statements of other hosts' removed rows that a session here excluded, remembered for when
#: they come back under a new id (an import with replace there)
CARRIED = 10_000
#: a burst: more requests than this per second of embedding makes the worker yield
BUSY_RATE = 500.0
CALM_PROBE_S = 0.05  #: how long the embedder listens for a burst before each batch
#: entries embedded between two returns of the C heap's free pages (``release_memory``), and
#: whenever the backlog is done
TRIM_EVERY = 8192
#: the share of the time the background indexing of a burst's entries may take (their BM25
#: rows: ~40 µs an entry, an add ~300 µs): it keeps up with the adds, so the first read after
#: a burst finds them indexed (within the background share alone it fell far behind)
INDEX_SHARE = 0.5
#: ...in slices of this much (a slice of the background share is 5 ms; under a burst each wait
#: between two slices lasts a turn of the event loop or more, so 5 ms slices got ~15 %)
INDEX_SLICE_S = 0.02
#: rows looked at on each side of a candidate for the turns around it in its session
#: (``neighbours``; sessions that log at the same time interleave their rows)
NEIGHBOUR_SCAN = 6
SHORT_REPLY_WORDS = 6  #: a reply this short ("oh wow", "go on") does not end a speaker's turn
#: a ranking's best rows whose later follow-ups are looked for (``follow_ups``): the same
#: speaker coming back to the same subject later ("booked the farmhouse in the Douro valley" /
#: weeks later "the farmhouse in the Douro valley cancelled on us, got the mill instead"):
#: the best 3 (below them a row is more often a distractor of the same kind than the subject:
#: of the lifts that mattered in the benchmark's dump, 19 of the 21 that brought evidence
#: came from the best 3, 648 of the 912 that cost from the 5 below; docs/performance.md)
FOLLOW_TOP = 3
FOLLOW_TERMS = 8  #: ...by each one's rarest words
#: ...that at most this share of the corpus's rows hold (at least ``FOLLOW_DF_MIN`` rows):
#: a word most turns have names no subject, and the work stays the length of short postings
FOLLOW_DF = 0.02
FOLLOW_DF_MIN = 8
#: a later row of the same speaker follows a row up when it matches the row's rare words at
#: least this share as well as the row itself does (their idf summed over those words)...
FOLLOW_SHARE = 0.4
#: ... and at least this many of them (one word in common is a coincidence: "jet black" /
#: "a jet engine"), and it updates the row (``updates.changes``: a new value, or a change said)
FOLLOW_SHARED = 2
FOLLOW_MAX = 2  #: follow-ups lifted per row at most (a value changed twice)
FOLLOW_LOOK = 32  #: ... among this many read at most (the best by those words first)
#: ...each lifted to this share of its row's score (just below it, when not above already)
FOLLOW_LIFT = 0.99
ROW_TERMS = 4096  #: rows whose words are kept for that (``_said``)
#: a ranking's best rows looked at for repeats (``said_again``): a turn whose words the same
#: speaker said before in a better-ranked row ("how's the weather over there", asked in most
#: sessions) tells the model nothing that row does not; unchecked, a question that matched
#: one small-talk line filled a 1k window with 27 copies of two of them
REPEAT_TOP = 300


def entry_text(e: Entry, max_chars: int) -> str:
    """What an entry is indexed and embedded as: its content, or a call's name and arguments;
    at most ``max_chars`` of it (bounded work; the entry itself stays whole)."""
    text = e.content or ""
    if not text and e.tool_calls:
        text = " ".join(f"{(c.get('function') or {}).get('name', '')} "
                        f"{(c.get('function') or {}).get('arguments', '')}"
                        for c in e.tool_calls if isinstance(c, dict))
    return text[:max_chars]


def said_key(r: RemoteRow) -> str:
    """What another daemon's row said, as an exclusion of it records it: the same statement
    written again there under a new id (its session replaced by an import) is excluded again,
    also after a restart here (a removed row's text is not kept in the shared table)."""
    return hashlib.md5(f"{r.origin}\x00{r.session_id}\x00{float(r.created_at)!r}\x00{r.text}"
                       .encode(errors="replace")).hexdigest()


def forget_digest(e: Entry) -> str:
    """What an entry said, as a forget for recall records it: the same statement brought back
    under another id (an import with replace) is found again by its session, time and this."""
    whole = entry_text(e, 1 << 62)
    return hashlib.md5(f"{e.type}\x00{e.role}\x00{whole}".encode(errors="replace")).hexdigest()


#: a leading time stamp a client wrote into the text ("[Tue 5 Mar 2024 18:41] Ana: ...",
#: "(3:05 pm, 12 June 2023) Ana: ...": brackets, or parentheses around a span with a digit):
#: BM25 keeps it; the embedding leaves it out (a dozen word pieces of digits and brackets
#: that every such line shares, averaged into its 16 token vectors, blur what it says)
_STAMP = r"(?:\[[^\]\n]{1,48}\]|\([^)\n]{0,47}\d[^)\n]{0,47}\))"
_STAMPED = re.compile(rf"^\s*{_STAMP}\s*")
#: ... and the speaker's name after it ("Ana: ", "Mary Ann: ": capitalized words), left out
#: where a turn's own words are counted (the embedding keeps the name: measured, leaving it
#: out lost as much on one data set as it won on another, docs/decisions.md)
_LEAD = re.compile(rf"^\s*(?:{_STAMP}\s*)?"
                   r"(?:[A-ZÀ-ÖØ-Þ][\w'-]{0,23}(?: [A-ZÀ-ÖØ-Þ][\w'-]{0,23}){0,2}:\s)?")
#: a turn's head in any export's form: a stamp with a digit in it ("12/06/2023, 15:05 - ",
#: "[Tue 5 Mar 2024 18:41] ", "(3:05 pm, 12 June 2023) ") or none, then the speaker's name
#: and ": " (a sentence's colon after words with no digit is left alone)
_TURN_HEAD = re.compile(r"^\s*(?:(?:(?![.!?]\s)[^\n!?]){0,48}?\d(?:(?![.!?]\s)[^\n!?]){0,48}?\s)??"
                        r"[A-ZÀ-ÖØ-Þ][\w'-]{0,23}(?: [A-ZÀ-ÖØ-Þ][\w'-]{0,23}){0,2}:\s")
#: ... the name itself
_NAMED = re.compile(rf"^\s*(?:{_STAMP}\s*)?"
                    r"([A-ZÀ-ÖØ-Þ][\w'-]{0,23}(?: [A-ZÀ-ÖØ-Þ][\w'-]{0,23}){0,2}):\s")


def embedded(text: str) -> str:
    """What of an entry's indexed text the search model embeds."""
    return _STAMPED.sub("", text, count=1) if text[:1] in " [(" else text


def shareable(s: Session, e: Entry) -> bool:
    """Other hosts may recall it: not private, in a session that takes part in recall."""
    return s.meta.recall is not False and (e.metadata or {}).get("private") is not True


def indexed(e: Entry) -> bool:
    """System prompts are the session's instructions, never evidence to recall; everything
    else is (a pasted document or injected ``context`` entry included, whatever its role)."""
    return not (e.role == "system" and e.type == "message")


#: a slice of the start's indexing (``_load_rows``): the others' requests wait at most this
#: long behind it (more on a busy box)
LOAD_SLICE_S = 0.01
#: stored vectors read per query at start (``_load_vectors``: ~3 MB of blobs with the token
#: vectors)
LOAD_BATCH = 1024
#: rows per block of the vector arrays (``Blocks``)
BLOCK = 8192
#: entries indexed at once while a start loads (~2 ms: BM25's ``add_many`` pays per call)
LOAD_PART = 256


class Blocks:
    """A growable array of rows (each of ``row_shape``) kept in blocks of ``BLOCK`` rows:
    growing adds a block and never copies what is held (a corpus's vectors are ~4.6 KB a row:
    copying 100,000 of them to grow held the event loop for a few hundred ms), and at most one
    block is unused (zeros the kernel has not given pages to yet). Indexed like a numpy array
    by a row or an array of rows; ``matmul`` multiplies the first ``n`` rows."""

    def __init__(self, rows: int, row_shape: tuple[int, ...], dtype: Any) -> None:
        self.row_shape, self.dtype = tuple(row_shape), np.dtype(dtype)
        self.blocks: list[np.ndarray] = []
        self.ensure(rows)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.blocks) * BLOCK, *self.row_shape)

    def ensure(self, rows: int) -> None:
        while len(self.blocks) * BLOCK < rows:
            self.blocks.append(np.zeros((BLOCK, *self.row_shape), dtype=self.dtype))

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):  # a row, then an index within it: ``tok[row, :n]``
            row: np.ndarray = self[key[0]]
            return row[key[1:]]
        if isinstance(key, (int, np.integer)):
            return self.blocks[int(key) // BLOCK][int(key) % BLOCK]
        rows = np.asarray(key, dtype=np.int64)
        return self.take(rows, np.empty((len(rows), *self.row_shape), dtype=self.dtype))

    def take(self, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``self[rows]`` written into ``out`` (a caller's buffer: MaxSim gathers its
        candidates a chunk at a time, ``late.best``)."""
        which = rows // BLOCK
        present = _present(which)
        if len(present) == 1:  # one block (up to 8,192 rows): no mask, no temporary
            # ("clip": not buffered, as "raise" is; the rows are the caller's, all valid)
            np.take(self.blocks[present[0]], rows % BLOCK, axis=0, out=out, mode="clip")
            return out
        for b in present:
            m = which == b
            out[m] = self.blocks[b][rows[m] % BLOCK]
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, (int, np.integer)):
            self.blocks[int(key) // BLOCK][int(key) % BLOCK] = value
            return
        rows = np.asarray(key, dtype=np.int64)
        value = np.asarray(value)
        which = rows // BLOCK
        for b in _present(which):
            m = which == b
            self.blocks[b][rows[m] % BLOCK] = value[m]

    def put_bytes(self, rows: list[int], blobs: list[bytes], stored: str) -> None:
        """Rows written from their stored bytes (``stored``: their dtype on disk), each
        copied straight into its block: no joined temporary, which the daemon's mmap threshold
        would make the kernel fault in page by page (a start places ~280 MB of them)."""
        if np.dtype(stored) != self.dtype or not self.dtype.isnative:
            self[np.asarray(rows, dtype=np.int64)] = np.frombuffer(
                b"".join(blobs), dtype=stored).reshape(len(rows), *self.row_shape)
            return
        views = [b.data.cast("B") for b in self.blocks]
        size = self.dtype.itemsize * int(np.prod(self.row_shape))
        for r, blob in zip(rows, blobs, strict=True):
            at = (r % BLOCK) * size
            views[r // BLOCK][at:at + size] = blob

    def matmul(self, n: int, q: np.ndarray) -> np.ndarray:
        """The first ``n`` rows (2-D rows) times ``q`` ((dim,) or (dim, k)), block by block."""
        parts = [blk[: min(BLOCK, n - i * BLOCK)] @ q
                 for i, blk in enumerate(self.blocks) if i * BLOCK < n]
        if not parts:
            return np.zeros((0, *q.shape[1:]), dtype=np.float32)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _present(which: np.ndarray) -> list[int]:
    """The blocks an array of rows falls in (a few: a count per block, no sort)."""
    if not len(which):
        return []
    return np.flatnonzero(np.bincount(which)).tolist()


class Corpus:
    """One scope's rows. Row numbers never change; a removed row is dead (masked)."""

    def __init__(self) -> None:
        from memman_daemon.search.bm25 import Bm25
        self.bm25 = Bm25()
        self.eids = array("q")
        self.sids: list[str] = []
        self.codes = array("i")  #: row -> its session's number (``code_of``), for masks
        self.code_of: dict[str, int] = {}
        self.at = array("d")
        self.private = array("b")
        self.row_of: dict[int, int] = {}
        #: rows of other daemons' sessions: corpus id -> the entry as it is quoted
        self.remote: dict[int, Entry] = {}
        self.vec: Blocks | None = None  #: (capacity, dim) search-model vectors
        self.has_vec = np.zeros(0, dtype=bool)
        #: stand-in vectors of the static model (float16: only ranked while a row's search
        #: vector is pending, and dropped once none is)
        self.svec: Blocks | None = None
        self.has_svec = np.zeros(0, dtype=bool)
        #: packed token vectors (``search/late.py``): (capacity, TOKENS, width) uint8, and
        #: how many tokens each row has (0: none yet)
        self.tok: Blocks | None = None
        self.tok_n = np.zeros(0, dtype=np.int8)
        self.texts: list[str] = []
        #: rows from here on arrived after the last read prepared the stand-in vectors
        self.stand_in_from = 0
        #: bumped when a row's vector is replaced (not only set): cached cosines are stale
        self.vec_epoch = 0
        #: ...and when a row's token vectors are: kept MaxSim terms are stale
        self.tok_epoch = 0
        #: bumped by every change of a row (added, removed, a vector or stand-in set): a
        #: context answer sent again is the same only while this is (``RecallIndex.state``)
        self.changes = 0

    @property
    def n(self) -> int:
        return self.bm25.n

    def add(self, e: Entry, text: str, origin: str = "") -> int:
        """A row for ``e``; ``origin``: the other daemon whose session logged it (its session
        is another one than any of this daemon's of the same id)."""
        return self._place([e], [text], self.bm25.add(text_terms(text)), origin)

    def add_many(self, items: list[tuple[Entry, str]]) -> None:
        """``add`` of many rows of this daemon's sessions at once (a start indexes every
        entry: its terms numbered for all the rows at once, one BM25 ``add_numbered``)."""
        from memman_daemon.search.bm25 import MAX_TERMS
        texts = [text for _, text in items]
        first = self.bm25.add_numbered(*numbered_terms(texts, MAX_TERMS))
        self._place([e for e, _ in items], texts, first, "")

    def _place(self, es: list[Entry], texts: list[str], first: int, origin: str) -> int:
        """The rows' columns, after their BM25 documents (rows ``first``, ``first + 1``,
        ...), a column at a time (a start places every entry)."""
        n = len(es)
        self.changes += n
        ids = [e.id for e in es]
        sids = [e.session_id for e in es]
        self.eids.extend(ids)
        self.sids.extend(sids)
        code_of = self.code_of
        codes = [f"{origin}\x00{sid}" for sid in sids] if origin else sids
        self.codes.extend([code_of.setdefault(code, len(code_of)) for code in codes])
        self.at.extend([float(e.created_at) for e in es])
        self.private.extend([1 if (e.metadata or {}).get("private") is True else 0 for e in es])
        self.texts.extend(texts)
        self.row_of.update(zip(ids, range(first, first + n), strict=True))
        if origin:
            self.remote.update(zip(ids, es, strict=True))
        self._room(first + n - 1)
        return first

    def _room(self, row: int) -> None:
        """The per-row arrays hold ``row``."""
        if row >= len(self.has_vec):
            # grown by a quarter: at most that much room unused (a doubling left up to half
            # of ~4.6 KB a row of vectors empty)
            cap = len(self.has_vec)
            while cap <= row:
                cap = max(64, cap + cap // 4)
            self.has_vec = np.concatenate([self.has_vec, np.zeros(cap - len(self.has_vec), bool)])
            self.has_svec = np.concatenate([self.has_svec,
                                            np.zeros(cap - len(self.has_svec), bool)])
            self.tok_n = np.concatenate([self.tok_n,
                                         np.zeros(cap - len(self.tok_n), np.int8)])
            for rows in (self.vec, self.tok, self.svec):
                if rows is not None:
                    rows.ensure(cap)

    def remove(self, entry_id: int) -> None:
        row = self.row_of.pop(entry_id, None)
        if row is not None:
            self.changes += 1
            self.bm25.remove(row)
            self.has_vec[row] = False
            self.has_svec[row] = False
            self.tok_n[row] = 0
            self.texts[row] = ""
            self.remote.pop(entry_id, None)

    def of_session(self, session_id: str) -> np.ndarray:
        """Mask of the rows of one session."""
        code = self.code_of.get(session_id, -1)
        return np.frombuffer(self.codes, dtype=np.int32, count=self.n) == code

    def alive(self) -> np.ndarray:
        return np.frombuffer(self.bm25._alive, dtype=np.int8, count=self.n) != 0

    def set_vec(self, row: int, v: np.ndarray) -> None:
        self.changes += 1
        if self.vec is None or self.vec.shape[1] != len(v):
            self.vec = Blocks(len(self.has_vec), (len(v),), np.float32)
            self.has_vec[:] = False
            self.vec_epoch += 1
        elif self.has_vec[row]:
            self.vec_epoch += 1
        self.vec[row] = v
        self.has_vec[row] = True

    def set_tok(self, row: int, packed: np.ndarray, n: int) -> None:
        """A row's packed token vectors (``late.pack``)."""
        self.changes += 1
        if self.tok is None or self.tok.shape[1:] != packed.shape:
            self.tok = Blocks(len(self.has_vec), packed.shape, np.uint8)
            self.tok_n[:] = 0
            self.tok_epoch += 1
        elif self.tok_n[row]:
            self.tok_epoch += 1
        self.tok[row] = packed
        self.tok_n[row] = n

    def set_vecs(self, rows: list[int], blobs: list[bytes], dim: int) -> None:
        """``set_vec`` of many rows at once from their stored bytes (little-endian float32,
        ``dim`` each): a start reading the stored vectors."""
        self.changes += 1
        if self.vec is None or self.vec.shape[1] != dim:
            self.vec = Blocks(len(self.has_vec), (dim,), np.float32)
            self.has_vec[:] = False
            self.vec_epoch += 1
        elif self.has_vec[rows].any():
            self.vec_epoch += 1
        self.vec.put_bytes(rows, blobs, "<f4")
        self.has_vec[rows] = True

    def set_toks(self, rows: list[int], blobs: list[bytes], counts: list[int],
                 width: int) -> None:
        """``set_tok`` of many rows at once from their stored bytes (``TOKENS`` x ``width``
        packed values each)."""
        self.changes += 1
        shape = (late.TOKENS, width)
        if self.tok is None or self.tok.shape[1:] != shape:
            self.tok = Blocks(len(self.has_vec), shape, np.uint8)
            self.tok_n[:] = 0
            self.tok_epoch += 1
        elif self.tok_n[rows].any():
            self.tok_epoch += 1
        self.tok.put_bytes(rows, blobs, "u1")
        self.tok_n[rows] = counts


@dataclass
class Hits:
    """One retrieval over a corpus: per row its fused score and parts (rows with no part
    have score 0). Plain arrays, indexed by row."""

    corpus: Corpus
    fused: np.ndarray
    bm25: np.ndarray
    bm25_rank: np.ndarray  #: 1-based, 0 = not in the list
    cosine: np.ndarray
    vector_rank: np.ndarray
    stand_in: np.ndarray  #: the cosine came from the static model (vector pending)
    floor: float  #: least cosine that counts as related for the model in force
    pending: int = 0  #: rows of the corpus whose search vector is pending

    def order(self, mask: np.ndarray) -> list[int]:
        """Rows within ``mask`` that matched anything, best first."""
        idx = np.flatnonzero(mask & (self.fused > 0))
        return idx[np.argsort(-self.fused[idx], kind="stable")].tolist()

    def related(self, row: int) -> bool:
        """Enough to recall from another session: a shared informative word, or a cosine at
        least the model's similarity threshold."""
        return bool(self.bm25[row] > 0 or self.cosine[row] >= self.floor)

    def parts_of(self, rows: list[int]) -> list[dict[str, Any]]:
        """``parts`` of many rows (each array read once, not a numpy scalar per part)."""
        if not rows:
            return []
        idx = np.asarray(rows, dtype=np.int64)
        cols = zip(self.bm25[idx].tolist(), self.bm25_rank[idx].tolist(),
                   self.cosine[idx].tolist(), self.vector_rank[idx].tolist(),
                   self.stand_in[idx].tolist(), self.fused[idx].tolist(), strict=True)
        return [{"bm25": round(b, 4), "bm25_rank": int(br) or None, "vector": round(v, 4),
                 "vector_rank": int(vr) or None,
                 "vector_model": "static (pending)" if si else "search",
                 "fused": round(f, 6)} for b, br, v, vr, si, f in cols]

    def parts(self, row: int) -> dict[str, Any]:
        return {"bm25": round(float(self.bm25[row]), 4),
                "bm25_rank": int(self.bm25_rank[row]) or None,
                "vector": round(float(self.cosine[row]), 4),
                "vector_rank": int(self.vector_rank[row]) or None,
                "vector_model": "static (pending)" if self.stand_in[row] else "search",
                "fused": round(float(self.fused[row]), 6)}


@dataclass
class _Pending:
    queue: deque = field(default_factory=deque)  #: (corpus, entry id)
    embedded: int = 0
    started: float = 0.0
    rate: float = 0.0  #: rows embedded per second of the last batches
    inflight: int = 0  #: rows of the batch being embedded (taken off the queue, not set yet)


class RecallIndex(Component):
    stats_key = "recall"

    def __init__(self, *, config: Config, storage: RecallStorage, embedder: Embedder,
                 queue: EmbeddingQueue, background: BackgroundShare, sessions: Any) -> None:
        self.config, self.storage, self.embedder = config, storage, embedder
        #: the daemon's one background embedder: this index is one of its sources
        self.queue = queue
        queue.register(self)
        self.background, self.sessions = background, sessions
        self.corpora: dict[tuple[str, str], Corpus] = {}
        self.scope_of: dict[str, tuple[str, str]] = {}  #: session id -> its corpus key
        self.excluded: dict[str, set[int]] = {}  #: session id -> entry ids it does not recall
        #: this daemon's entries forgotten for recall on another host (``forget_remote`` there):
        #: their own session keeps them, no other session recalls them
        self.forgotten: set[int] = set()
        #: what those entries said (session, created_at, ``forget_digest``): the same statement
        #: under a new id (an import with replace) is forgotten too
        self.forgotten_said: set[tuple[str, float, str]] = set()
        #: bumped by every change here that is not a row's (an exclusion, a forget, a model
        #: change, another host's news): ``state``
        self.changes = 0
        self._pending = _Pending()
        self._trimmed_at = 0  #: entries embedded when the C heap was last trimmed
        self._loader: asyncio.Task[None] | None = None
        self._warm: asyncio.Task[None] | None = None  #: the local models loading (``warm``)
        self._loaded = asyncio.Event()  #: the rows the daemon started with are indexed
        self._damaged = 0  #: stored vectors of the start that could not be read
        #: while the start loads: its entries whose stored vector is not placed yet (each may
        #: be waiting for one: ``stats`` counts them as pending until the load has said)
        self._load_left = 0
        self._queries: OrderedDict[tuple[str, str], Any] = OrderedDict()
        #: (corpus, question vector) -> (vec_epoch, rows, rows with a vector, cosines)
        self._cos: OrderedDict[tuple[int, bytes], tuple[int, int, np.ndarray, np.ndarray]] \
            = OrderedDict()
        #: (model, question) -> its search-model pass (sentence vector, token vectors, word
        #: pieces), the newest ``ASKED_KEPT``: the entry of that text takes it (``embed_next``)
        self._asked: OrderedDict[tuple[str, str], tuple[np.ndarray, np.ndarray, list[str]]] \
            = OrderedDict()
        #: (corpus, question) -> ((rows, live rows), every row's BM25): ``_lexical``
        self._bm25_of: OrderedDict[tuple[int, str], tuple[tuple[int, int], np.ndarray]] = \
            OrderedDict()
        #: (corpus, question tokens) -> (tok_epoch, its MaxSim terms of the rows scored)
        self._kept_best: OrderedDict[tuple[int, bytes], tuple[int, late.Kept]] = OrderedDict()
        #: corpus -> (each row's speaker number, -1: not read yet, -2: not a turn; whether
        #: it is a short reply), read once per row for ``neighbours``
        self._turns: weakref.WeakKeyDictionary[Corpus, tuple[np.ndarray, np.ndarray]] = \
            weakref.WeakKeyDictionary()
        self._speaker_of: dict[tuple[str, str], int] = {}
        #: per corpus, each row's words as ``said_again`` compares them (0: not read yet)
        self._said_keys: weakref.WeakKeyDictionary[Corpus, np.ndarray] = \
            weakref.WeakKeyDictionary()
        #: (corpus, row) -> (its text, what it says), for ``follow_ups``
        self._row_said: OrderedDict[tuple[int, int], tuple[str, updates.Said]] = OrderedDict()
        self._unsaved: list[tuple[Corpus, int, str, str, np.ndarray]] = []
        #: (corpus, entry id, session id, model, packed token vectors, tokens) to keep
        self._unsaved_tok: list[tuple[Corpus, int, str, str, np.ndarray, int]] = []
        #: where token vectors are kept: the storage, as vectors are (a shared store keeps
        #: this daemon's locally too, and hands every row's to the other hosts)
        self._tok_store: Any = storage
        #: (session, entries) appended and not indexed yet (see ``appended``)
        self._incoming: deque[tuple[Session, list[Entry]]] = deque()
        #: entries queued, per owner (``state``: once indexed, their corpus's rows change)
        self._arrived = Changes()
        #: other daemons' rows: corpus id -> (its corpus, the row)
        self._remote_in: dict[int, tuple[Corpus, RemoteRow]] = {}
        #: what a removed (or, at start, any excluded) row of another daemon said
        #: (``said_key``) -> the sessions here that excluded it (``_changed``)
        self._carried: OrderedDict[str, list[str]] = OrderedDict()
        #: text -> a row whose vector it has (repeated texts are embedded once)
        self._by_text: OrderedDict[str, tuple[Corpus, int]] = OrderedDict()

    # --- scope ---------------------------------------------------------------------------
    def key(self, s: Session) -> tuple[str, str]:
        return session_owner(s)

    def state(self, s: Session) -> tuple[int, ...] | None:
        """What a read for ``s`` depends on here, as numbers that change whenever it does
        (this index's own changes, the rows waiting to be indexed, its corpus's rows); None
        while the start loads (every read then may see more)."""
        if not self._loaded.is_set():
            return None
        k = self.scope_of.get(s.id, self.key(s))
        c = self.corpora.get(k)
        return (self.changes, *self._arrived.of(k), id(c), c.changes if c is not None else -1)

    def corpus_of(self, s: Session) -> Corpus:
        k = self.key(s)
        c = self.corpora.get(k)
        if c is None:
            c = self.corpora[k] = Corpus()
        return c

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        """What a request may need at once (exclusions, forgotten entries); the rows
        themselves are indexed after the daemon answers, in slices (``_load_rows``): a
        read of the index waits for them (``loaded``)."""
        for sid, eid, said in await self.storage.exclusions():
            self.excluded.setdefault(sid, set()).add(eid)
            if said:  # found again if it comes back under a new id (``_changed``)
                self._carry(said, sid)
        self._forgot(await self.storage.forgotten())
        for s in self.sessions.by_id.values():
            self.scope_of[s.id] = self.key(s)
            self._load_left += sum(1 for e in s.entries if indexed(e))
        self._loader = asyncio.get_running_loop().create_task(self._load_rows(),
                                                              name="memman-recall-load")

    async def loaded(self) -> None:
        """Wait until the rows the daemon started with are indexed (at start, in the
        background), so a read sees every one of them."""
        if not self._loaded.is_set():
            await self._loaded.wait()

    async def _load_rows(self) -> None:
        """The sessions' entries indexed, then their stored vectors and token vectors read a
        batch at a time straight into the corpora, each step a slice that yields (a start
        on 60,000 entries held the event loop for seconds, and kept ~270 MB of blobs in one
        dict); then the other daemons' rows (a shared store) and the background embedder."""
        if any(s.entries for s in self.sessions.by_id.values()):
            self.warm()  # started by the app already, as a rule
        warm = self._warm
        try:
            for s in list(self.sessions.by_id.values()):
                entries, i = list(s.entries), 0
                while i < len(entries) and self.sessions.by_id.get(s.id) is s:
                    t0 = time.perf_counter()
                    while i < len(entries) and time.perf_counter() - t0 < LOAD_SLICE_S:
                        # the entries still in the session (one removed, cleared or rolled
                        # back meanwhile is not brought back; the id's current entry is used)
                        part = [cur for e in entries[i:i + LOAD_PART]
                                if (cur := s.by_id.get(e.id)) is not None]
                        self._index(s, part, queue=False)
                        i += LOAD_PART
                    await asyncio.sleep(0)
            await self._load_vectors()
            self.storage.attach(self._shareable, self._changed, lambda: self.embedder.model_id,
                                self._digest_of)
            await self.storage.load()  # with a shared store: the other daemons' rows
        except Exception:
            log.exception("loading the recall index failed; the rows not loaded are missing "
                          "from recall until the daemon restarts")
        finally:
            self._load_left = 0
            self._loaded.set()
            if warm is not None:
                with contextlib.suppress(Exception):  # a model that cannot load says so
                    await warm
        self.queue.wake()  # the rows left without vectors

    def warm(self) -> None:
        """Start loading the local models in a thread (once): with entries to recall, the
        first question after a restart then waits for neither after the rows. The app starts
        it as soon as the store is open, so the loads overlap the session log's read (a data
        dir with no entries never pays for them, nor writes their cache)."""
        if self._warm is None:
            self._warm = asyncio.get_running_loop().create_task(
                self._warm_models(), name="memman-recall-model")

    async def _warm_models(self) -> None:
        """The search model (ONNX Runtime), then the relevance model a question's static
        vector comes from: loaded on the first question instead, behind the event loop's
        indexing of the other rows, its imports took 7 s of a 60,000-entry restart."""
        if await self.embedder.search_ready():
            await self.embedder.relevance_ready()

    async def _load_vectors(self) -> None:
        """The stored vectors (and token vectors) of the model in force, ``LOAD_BATCH`` rows
        a query, set on their rows in bulk; rows left without either are queued for the
        background embedder."""
        model = self.embedder.model_id
        late_on = self.embedder.late and self._tok_store is not None
        corpora = list(self.corpora.values())
        last = "tokens" if late_on else "vectors"
        for kind in ("vectors", "tokens") if model else ():
            if kind == "tokens" and not late_on:
                break
            read = self.storage.vectors if kind == "vectors" else self._tok_store.tokens
            # one batch read ahead: the reader's thread fetches the next while this one is
            # placed (a start reads ~120 batches of each kind at 60,000 entries)
            ahead: asyncio.Task[Any] | None = asyncio.ensure_future(
                read(model, -1, LOAD_BATCH))
            while ahead is not None and model == self.embedder.model_id:
                got = await ahead
                ahead = None
                if not got:
                    break
                if len(got) == LOAD_BATCH:
                    ahead = asyncio.ensure_future(read(model, got[-1][0], LOAD_BATCH))
                # a row of another length than the batch's usual one is damaged (or of
                # another dimension): left out, its entry is embedded again (comprehensions:
                # a start reads every row, 60,000 of each kind)
                if kind == "vectors":
                    usual = Counter(len(b) for _, b in got).most_common(1)[0][0]
                    left = [] if not usual or usual % 4 else [
                        (eid, b) for eid, b in got if len(b) == usual]
                else:
                    usual = Counter(len(b[1]) for _, b in got).most_common(1)[0][0]
                    left = [] if not usual or usual % late.TOKENS else [
                        (eid, b) for eid, b in got
                        if len(b[1]) == usual and 0 < b[0] <= late.TOKENS]
                self._damaged += len(got) - len(left)
                by_corpus: list[tuple[Corpus, list[int], list[Any]]] = []
                for c in corpora:  # one corpus per user: a few
                    if not left:
                        break
                    get = c.row_of.get
                    at = [get(eid) for eid, _ in left]
                    hit = [i for i, r in enumerate(at) if r is not None]
                    if hit:
                        by_corpus.append((c, [r for r in at if r is not None],
                                          [left[i][1] for i in hit]))
                    if len(hit) < len(left):
                        left = [x for x, r in zip(left, at, strict=True) if r is None]
                    else:
                        left = []
                for c, rows, blobs in by_corpus:
                    if kind == "vectors":
                        c.set_vecs(rows, blobs, usual // 4)
                    else:
                        c.set_toks(rows, [b[1] for b in blobs], [b[0] for b in blobs],
                                   usual // late.TOKENS)
                    if kind == last:  # the row has all it needs, if the kinds before had it
                        self._load_left -= len(rows)
                await asyncio.sleep(0)
            if ahead is not None:  # the model changed meanwhile: that read is not used
                ahead.cancel()
        if self._damaged:
            log.warning("%d stored recall vectors could not be read; their entries are "
                        "embedded again", self._damaged)
        # rows still without a vector (or token vectors) wait for the background embedder;
        # the entries that arrived meanwhile are queued already (and counted as such); those
        # the load indexed itself leave the incoming queue (counted once, not twice)
        self._load_left = 0
        self._incoming = deque(
            (sess, rest) for sess, arrived in self._incoming
            if (rest := [e for e in arrived if e.id not in self.corpus_of(sess).row_of]))
        queued = {(id(c), eid) for c, eid in self._pending.queue}
        for c in corpora:
            n = c.n
            need = c.alive() & ~c.has_vec[:n]
            if late_on:
                need |= c.alive() & (c.tok_n[:n] == 0)
            for row in np.flatnonzero(need).tolist():
                eid = c.eids[row]
                if (id(c), eid) not in queued:
                    self._pending.queue.append((c, eid))
            have = np.flatnonzero(c.has_vec[:n] & c.alive()).tolist()
            for i in range(0, len(have), 8192):
                for row in have[i:i + 8192]:
                    self._remember(c.texts[row], c, row)
                await asyncio.sleep(0)

    async def close(self) -> None:
        await stop_task(self._loader)
        self._loader = None
        await stop_task(self._warm)  # a start given up before the rows were read
        with contextlib.suppress(Exception):
            await self._save()
        await self.storage.close()

    def stats(self) -> dict[str, Any]:
        p = self._pending
        return {"scope": self.config.recall.scope, "corpora": len(self.corpora),
                # the rows the daemon started with are still being indexed (``_load_rows``)
                "loading": not self._loaded.is_set(),
                "entries": sum(c.bm25.live for c in self.corpora.values()),
                # with embeddings off no vector is coming: nothing is pending; while the start
                # loads, its entries whose stored vector is not read yet count as pending (a
                # client waiting for 0 must not stop before the load has said which are)
                "pending_vectors": self.waiting() + max(self._load_left, 0)
                if self.embedder.enabled else 0,
                "embedded": p.embedded,
                "drain_per_s": round(p.rate, 1), "model": self.embedder.model_id,
                # with a shared store: this daemon's part of the shared rows
                **({"shared": got} if (got := self.storage.stats()) else {})}

    # --- keeping up with the session log (hooks set by the app) ---------------------------
    def appended(self, s: Session, entries: list[Entry], *, queue: bool = True) -> None:
        """New entries of ``s`` (the session log's hook). On the add path they are only
        queued (an append): indexing them (~15 µs an entry) is done by the next read, or
        by the background worker, whichever comes first."""
        self.scope_of[s.id] = self.key(s)
        if queue:
            self._incoming.append((s, entries))
            self._arrived.bump(self.key(s))
            self.queue.wake()
        else:
            self._index(s, entries, queue=False)

    def _index(self, s: Session, entries: list[Entry], *, queue: bool) -> None:
        c = self.corpus_of(s)
        cap = self.config.recall.max_chars
        shared: list[tuple[Entry, str]] = []
        fresh: dict[int, tuple[Entry, str]] = {}
        for e in entries:
            if indexed(e) and e.id not in c.row_of and e.id not in fresh:
                fresh[e.id] = (e, entry_text(e, cap))
        if len(fresh) > 1:
            c.add_many(list(fresh.values()))
        else:
            for e, text in fresh.values():
                c.add(e, text)
        for e, text in fresh.values():
            forgotten = self._is_forgotten(s, e)
            if queue:
                self._pending.queue.append((c, e.id))
                if shareable(s, e) and not forgotten:
                    shared.append((e, text))
        if shared:  # the storage queues them (other hosts recall them)
            self.storage.arrived(s, shared)

    def _shareable(self) -> list[tuple[Session, list[tuple[Entry, str]]]]:
        """This daemon's entries other hosts may recall, by session (the storage's truth
        after an outage)."""
        cap = self.config.recall.max_chars
        return [(s, [(e, entry_text(e, cap)) for e in s.entries
                     if indexed(e) and shareable(s, e) and not self._is_forgotten(s, e)])
                for s in list(self.sessions.by_id.values())]

    def _is_forgotten(self, s: Session, e: Entry) -> bool:
        """``e`` was forgotten for recall on another host: by its id, or as the same statement
        of that session brought back under another id."""
        if e.id in self.forgotten:
            return True
        if self.forgotten_said and (s.id, float(e.created_at), forget_digest(e)) \
                in self.forgotten_said:
            self.forgotten.add(e.id)
            return True
        return False

    def _digest_of(self, entry_id: int, session_id: str, created_at: float) -> str:
        s = self.sessions.by_id.get(session_id)
        e = s.by_id.get(entry_id) if s is not None else None
        if e is None or float(e.created_at) != float(created_at):
            return ""
        return forget_digest(e)

    def settle(self) -> None:
        """Index every queued entry now (before a read that must see them all)."""
        while self._incoming:
            s, entries = self._incoming.popleft()
            if self.sessions.by_id.get(s.id) is s:  # not deleted or replaced meanwhile
                self._index(s, entries, queue=True)

    async def settle_sliced(self, *, paced: bool = False) -> None:
        """``settle`` in slices that yield to other clients (a burst of adds, then a read);
        ``paced`` (the background worker): each slice within the background share, so a
        burst of adds is served first."""
        while self._incoming:
            share = max(INDEX_SHARE, self.config.limits.background_share)
            slice_s = INDEX_SLICE_S if paced else SLICE_S
            async with self.background.turn(share) if paced else contextlib.nullcontext():
                t0 = time.perf_counter()
                while self._incoming and time.perf_counter() - t0 < slice_s:
                    s, entries = self._incoming.popleft()
                    if len(entries) > 256:  # a large import: a piece at a time
                        self._incoming.appendleft((s, entries[256:]))
                        entries = entries[:256]
                    if self.sessions.by_id.get(s.id) is s:
                        self._index(s, entries, queue=True)
            if self._incoming and not paced:
                await asyncio.sleep(0)

    def indexing(self) -> bool:
        """Entries are waiting for their rows, or the start's rows are being loaded (other
        background work lets this go first)."""
        return bool(self._incoming) or not self._loaded.is_set()

    def removed(self, s: Session, entry_ids: list[int]) -> None:
        self.changes += 1
        self.settle()
        c = self.corpora.get(self.scope_of.get(s.id, self.key(s)))
        if c is not None:
            for eid in entry_ids:
                c.remove(eid)
        self.forgotten.difference_update(entry_ids)
        self.storage.removed(entry_ids)

    def session_gone(self, session_id: str) -> None:
        """The session was deleted, cleared or replaced: its rows leave the index (its
        vector rows left with the session's rows, in the same transaction)."""
        self.settle()
        k = self.scope_of.pop(session_id, None)
        c = self.corpora.get(k) if k is not None else None
        if c is not None:
            code = c.code_of.get(session_id, -1)  # this daemon's session, not another's
            # its forgotten entries stay forgotten (a reassigned session's are the same)
            for eid in [eid for eid, r in c.row_of.items() if c.codes[r] == code]:
                c.remove(eid)
        # a person's exclusions stay: they are the session's state, not its rows (cleared or
        # replaced, it still does not recall them); only a deleted session drops them
        self.storage.session_removed(session_id)
        self.changes += 1

    def recall_changed(self, s: Session) -> None:
        """``s``'s recall flag changed (``memman_session_open``): here the window reads the
        flag as it recalls; other hosts learn it from the shared rows (they leave, or come
        back)."""
        self.changes += 1
        self.settle()
        self.storage.resync()

    async def forget_remote(self, entry_id: int, ops: list[Any]) -> None:
        """``memman_memory_forget`` of another daemon's entry as recalled here (``remote_row``):
        it leaves recall on every host (``RecallStorage.forget``; ``ops``: its audit row), and
        this index at once."""
        await self.storage.forget(entry_id, ops)
        self.changes += 1
        got = self._remote_in.pop(entry_id, None)
        if got is not None:
            got[0].remove(entry_id)

    def remote_row(self, entry_id: int) -> RemoteRow | None:
        got = self._remote_in.get(entry_id)
        return got[1] if got is not None else None

    def _forgot(self, rows: list[Forgotten]) -> None:
        """This daemon's entries another host forgot for recall (each still the entry that was
        forgotten: its session and time, and what it said when that is recorded)."""
        self.changes += 1
        for eid, sid, created, digest in rows:
            s = self.sessions.by_id.get(sid)
            if digest:
                self.forgotten_said.add((sid, float(created), digest))
                for e in s.entries if s is not None else ():
                    if float(e.created_at) == float(created) and forget_digest(e) == digest:
                        self.forgotten.add(e.id)
                continue
            e = s.by_id.get(eid) if s is not None else None
            if e is not None and float(e.created_at) == float(created):
                self.forgotten.add(eid)

    def _changed(self, change: Change) -> list[Any]:
        """Other daemons' rows (the storage's reader): new ones join their scope's corpus,
        removed ones leave it, vectors embedded elsewhere are set; this daemon's entries
        another host forgot leave every other session's recall. Answers the ops to keep:
        a session's exclusion of a removed row, carried to the same statement written again
        under a new id (its session replaced by an import there)."""
        self.changes += 1
        self._forgot(change.forgotten)
        self._carry_from(change.gone)
        ops: list[Any] = []
        for r in change.rows:  # a row read again was written again: it replaces the one held
            self._add_remote(r)
            said = said_key(r)
            for sid in self._carried.pop(said, None) or ():
                if sid not in self.sessions.by_id:  # deleted meanwhile: its exclusions went
                    continue
                excl = self.excluded.setdefault(sid, set())
                if r.id not in excl:
                    excl.add(r.id)
                    ops.append(self.storage.exclude_op(sid, r.id, time.time(), said))
        for key in change.gone:
            got = self._remote_in.pop(key, None)
            if got is not None:
                got[0].remove(key)
        for key, blob in change.vectors:
            got = self._remote_in.get(key)
            row = got[0].row_of.get(key) if got is not None else None
            if got is not None and row is not None:
                got[0].set_vec(row, np.frombuffer(blob, dtype="<f4"))
                self._remember(got[0].texts[row], got[0], row)
        for key, n, packed in change.tokens:  # MaxSim for them, embedded where they were said
            got = self._remote_in.get(key)
            row = got[0].row_of.get(key) if got is not None else None
            if got is not None and row is not None and n > 0:
                got[0].set_tok(row, np.frombuffer(packed, dtype=np.uint8).reshape(
                    late.TOKENS, -1), n)
        self.queue.wake()
        return ops

    def _carry_from(self, gone: list[int]) -> None:
        """Remember the statements of removed rows a session here excluded (``_changed``)."""
        if not gone:
            return
        wanted = set(gone)
        by_key: dict[int, list[str]] = {}
        for sid, ids in self.excluded.items():
            for eid in ids & wanted:
                by_key.setdefault(eid, []).append(sid)
        for key, sessions in by_key.items():
            got = self._remote_in.get(key)
            if got is not None:
                said = said_key(got[1])
                for sid in sessions:
                    self._carry(said, sid)

    def _carry(self, said: str, session_id: str) -> None:
        got = self._carried.setdefault(said, [])
        if session_id not in got:
            got.append(session_id)
        while len(self._carried) > CARRIED:
            self._carried.popitem(last=False)

    def _add_remote(self, r: RemoteRow) -> None:
        """Another daemon's row joins its scope's corpus; one held already under that id (its
        session reassigned to another user, its origin renamed) leaves first, and its vector
        is kept when the text is the same (the origin's vector is not sent again)."""
        text = r.text[: self.config.recall.max_chars]
        kept = kept_tok = None
        old = self._remote_in.pop(r.id, None)
        if old is not None:
            oc, _ = old
            orow = oc.row_of.get(r.id)
            if (orow is not None and oc.vec is not None and oc.has_vec[orow]
                    and oc.texts[orow] == text):
                kept = oc.vec[orow].copy()
                if oc.tok is not None and oc.tok_n[orow]:
                    kept_tok = (oc.tok[orow].copy(), int(oc.tok_n[orow]))
            oc.remove(r.id)
        k = corpus_key(r.user_id, r.tenant_id)
        c = self.corpora.get(k)
        if c is None:
            c = self.corpora[k] = Corpus()
        e = Entry(r.id, r.session_id, r.type, r.role, r.content, 0, r.created_at, name=r.name)
        row = c.add(e, text, origin=r.origin)
        self._remote_in[r.id] = (c, r)
        if kept is not None:
            c.set_vec(row, kept)
            if kept_tok is not None:
                c.set_tok(row, *kept_tok)
        elif not self._origin_embeds(c, r.id):
            self._pending.queue.append((c, r.id))

    def _origin_embeds(self, c: Corpus, eid: int) -> bool:
        """Another daemon's row whose own daemon embeds it with the model in force here: its
        vector comes from there (the static model stands in meanwhile)."""
        got = self._remote_in.get(eid)
        return got is not None and bool(got[1].model) and got[1].model == self.embedder.model_id

    def entry_at(self, c: Corpus, row: int) -> tuple[Entry | None, Session | None]:
        """A row's entry and its session on this daemon (None: another daemon's session)."""
        eid = c.eids[row]
        e = c.remote.get(eid)
        if e is not None:
            return e, None
        s = self.sessions.by_id.get(c.sids[row])
        return (s.by_id.get(eid) if s is not None else None), s

    async def on_session_deleted(self, session_id: str, client: str = "") -> None:
        """A deleted session: its rows left with ``session_gone``; its exclusions go too (their
        rows left in the delete's transaction)."""
        self.changes += 1
        self.excluded.pop(session_id, None)

    def model_changed(self) -> None:
        self.changes += 1
        self.settle()
        for c in self.corpora.values():
            c.has_vec[:] = False
            c.vec = None
            c.vec_epoch += 1
            c.tok = None
            c.tok_n[:] = 0
            c.tok_epoch += 1
            for eid in c.row_of:
                if not self._origin_embeds(c, eid):
                    self._pending.queue.append((c, eid))
        self._queries.clear()
        self._asked.clear()
        self._cos.clear()
        self._kept_best.clear()
        self._by_text.clear()
        self.queue.wake()

    # --- exclusions (a person's "not in this session") --------------------------------------
    async def set_exclusion(self, session_id: str, entry_id: int, excluded: bool, at: float,
                            ops: list[Any]) -> None:
        """Session ``session_id`` no longer recalls entry ``entry_id`` (``excluded``), or again
        does: written through the storage with ``ops`` (its audit row) in one transaction,
        then kept here. The one place an exclusion is written (``memman_session_exclude``,
        ``memman_undo``)."""
        row = self._remote_in.get(entry_id)
        said = said_key(row[1]) if row is not None else ""
        await self.storage.write_exclusion(session_id, entry_id, excluded, at, ops, said)
        self.changes += 1
        if said and not excluded:  # not brought back excluded under a new id either
            kept = self._carried.get(said)
            if kept is not None and session_id in kept:
                kept.remove(session_id)
        got = self.excluded.setdefault(session_id, set())
        if excluded:
            got.add(entry_id)
        else:
            got.discard(entry_id)

    # --- retrieval -----------------------------------------------------------------------
    async def query_vectors(self, query: str) -> tuple[Any, Any, Any, Any]:
        """(search-model vector, static vector, informative token vectors or None, the word
        each of those tokens is part of) of the question; cached. The search model runs in a worker thread (milliseconds), the static
        one inline (microseconds)."""
        emb = self.embedder
        key = (emb.model_id, query)
        got = self._queries.get(key)
        if got is not None:
            self._queries.move_to_end(key)
            return got
        vec = stat = qtok = qwords = None
        if emb.enabled:
            both = await emb.embed_tokens([query[:2000]]) if emb.late else None
            if both is not None:  # one pass: the sentence vector and the token vectors
                vec = both[0][0]
                qtok = late.question_tokens(both[1][0], both[2][0])
                qwords = late.question_words(both[1][0], both[2][0])
                # the newest user message is the question, and an entry to embed: its row
                # takes this pass's outputs (``embed_next``) instead of a second one
                self._asked[(emb.model_id, query[:2000])] = (vec, both[1][0], both[2][0])
                while len(self._asked) > ASKED_KEPT:
                    self._asked.popitem(last=False)
            else:
                v = await emb.embed([query[:2000]])
                vec = None if v is None else v[0]
            if emb.local and await emb.relevance_ready():
                sv = emb.cached([query[:2000]])
                stat = None if sv is None else sv[0]
        got = (vec, stat, qtok, qwords)
        self._queries[key] = got
        while len(self._queries) > QUERY_CACHE:
            self._queries.popitem(last=False)
        return got

    async def question_vectors(self, query: str,
                               s: Session | None = None) -> list[tuple[Any, Any, Any, Any]]:
        """The awaited part of a read, done before it: the incoming entries indexed (in
        slices), the stand-in vectors of ``s``'s corpus rows still waiting for theirs (in a
        worker thread) and the vectors of each of the question's facets. The scoring that
        follows (``retrieve_facets``) awaits nothing, so it runs over one corpus."""
        await self.loaded()
        await self.settle_sliced()
        if s is not None and self.embedder.local:
            await self._prepare_stand_ins(self.corpus_of(s))
        return [await self.query_vectors(f) for f in facets(query)]

    async def _prepare_stand_ins(self, c: Corpus) -> None:
        """Static vectors for the newest rows still without a search vector, at most
        ``STATIC_PER_REQUEST``, computed off the event loop (after a burst of adds thousands
        are pending: inline they would hold every other client for a tenth of a second); up
        to ``STATIC_ON_LOOP`` of them (the new question just added) on it."""
        n = c.stand_in_from = c.n
        # the newest rows still waiting, those of them without a stand-in yet: the next read
        # after this one makes none (the rest rank by BM25 alone until theirs arrive)
        newest = np.flatnonzero(c.alive() & ~c.has_vec[:n])[::-1][:STATIC_PER_REQUEST]
        if not len(newest) and c.svec is not None:  # every row has its search vector
            c.svec = None
            c.has_svec[:] = False
            c.changes += 1
        todo = newest[~c.has_svec[newest]].tolist()
        if not todo:
            return
        texts = [c.texts[r] for r in todo]
        if len(todo) <= STATIC_ON_LOOP and await self.embedder.relevance_ready():
            vecs = self.embedder.cached(texts)
        else:
            vecs = await self.embedder.relevance(texts)
        if vecs is None or not len(vecs):
            return
        if c.svec is None or c.svec.shape[1] != vecs.shape[1]:
            c.svec = Blocks(len(c.has_svec), (vecs.shape[1],), np.float16)
            c.has_svec[:] = False
        for r, t, v in zip(todo, texts, vecs, strict=True):
            if c.texts[r] == t:  # not removed meanwhile
                c.svec[r] = v
                c.has_svec[r] = True
                c.changes += 1

    def retrieve_facets(self, c: Corpus, query: str, vecs: list[tuple[Any, ...]],
                        mask: np.ndarray | None = None) -> Hits:
        """``retrieve`` for a question that asks for several things: each facet (the whole
        question, and each of its clauses when it is long; ``vecs`` from
        ``question_vectors``) is retrieved on its own and a row keeps its best facet's score
        — the facets' rankings interleave, so every thing asked for gets its best hits, not
        only the words the question repeats most. Then the best rows' follow-ups are lifted
        (``follow_ups``)."""
        parts = facets(query)
        have = c.has_vec[:c.n] & c.alive()
        given = [v[0] for v in vecs if v[0] is not None]
        if len(given) > 1 and c.vec is not None and have.any():
            self._cosines_many(c, given, have)  # every facet in one pass over the matrix
        hits = self.retrieve(c, query, vecs[0], mask)
        for f, qv in zip(parts[1:], vecs[1:], strict=True):
            more = self.retrieve(c, f, qv, mask)
            better = more.fused > hits.fused
            if better.any():
                hits.fused = np.where(better, more.fused, hits.fused)
                for name in ("bm25", "bm25_rank", "cosine", "vector_rank", "stand_in"):
                    setattr(hits, name, np.where(better, getattr(more, name),
                                                 getattr(hits, name)))
        # once for the question: the same speaker's later turns on its best rows' subjects
        seen = c.alive() if mask is None else c.alive() & mask[:c.n]
        hits.fused = self.follow_ups(c, hits.fused, seen)
        hits.fused = self.said_again(c, hits.fused)
        return hits

    def said_again(self, c: Corpus, fused: np.ndarray) -> np.ndarray:
        """``fused`` with the repeats among its best ``REPEAT_TOP`` rows put below every
        other of them: a conversation turn whose words (its stamp and name left out, the
        values kept: "the code is 4417" / "the code is 5512" differ) its speaker said in a
        better-ranked row. They keep their order among themselves and may still fill what
        room is left; a turn with no word of its own ("ok", "yes": stop words only) is never
        a repeat."""
        n = c.n
        top = np.flatnonzero(fused[:n] > 0)
        if len(top) < 2:
            return fused
        if len(top) > REPEAT_TOP:
            top = top[np.argpartition(-fused[top], REPEAT_TOP)[:REPEAT_TOP]]
        top = top[np.argsort(-fused[top], kind="stable")]
        spk = self._speakers(c, top)[0][top].tolist()
        keys = self._repeat_keys(c, top)[top].tolist()
        seen: set[tuple[int, int]] = set()
        again: list[int] = []
        for r, who, key in zip(top.tolist(), spk, keys, strict=True):
            if who < 0 or key == 1:  # not a conversation turn, or no word of its own
                continue
            if (who, key) in seen:
                again.append(r)
            else:
                seen.add((who, key))
        if not again:
            return fused
        rows = np.array(again, dtype=np.int64)
        rest = np.setdiff1d(top, rows, assume_unique=True)
        floor = float(fused[rest].min()) if len(rest) else float(fused[rows].min())
        out = fused.copy()
        # below the lowest of the others, in their own order
        out[rows] = fused[rows] / float(fused[rows].max()) * floor * 0.5
        return out

    def retrieve(self, c: Corpus, query: str, qvecs: tuple[Any, ...],
                 mask: np.ndarray | None = None) -> Hits:
        """Every row of ``c`` scored against ``query``: BM25 and cosine, fused by RRF; then
        the best ``[recall] rerank_candidates`` of the fusion put in MaxSim order (late interaction: each of
        the question's informative tokens against the row's token vectors), where the row
        has them (a row without keeps its place). ``mask``: the caller's scope, applied
        before ranking (rows outside it are in no list)."""
        n = c.n
        # the core's in-memory backends: BM25 postings, one matrix-vector product
        bm = self._lexical(c, query)
        stand_in = np.zeros(n, dtype=bool)
        alive = c.alive()
        vec, stat = qvecs[0], qvecs[1]
        qtok = qvecs[2] if len(qvecs) > 2 else None
        qwords = qvecs[3] if len(qvecs) > 3 else None
        have = c.has_vec[:n] & alive
        # one matrix-vector product, or the rows that changed for a question asked again
        if vec is not None and c.vec is not None and have.any():
            cos = self._cosines(c, vec, have)
        else:
            cos = np.zeros(n, dtype=np.float32)
        missing = alive & ~have
        if stat is not None and missing.any():
            self._stand_ins(c, missing)
            got = missing & c.has_svec[:n]
            if got.any() and c.svec is not None:
                # only the rows that have one (not a product over the whole matrix)
                raw = c.svec[np.flatnonzero(got)].astype(np.float32) @ np.asarray(
                    stat, dtype=np.float32)
                # the static model's cosines run lower: put them on the search model's scale
                # by their standing among this corpus (z-score), so the two rank together
                ref = cos[have] if have.sum() >= 20 else None
                mu_s, sd_s = float(raw.mean()), float(raw.std()) or 1.0
                if ref is not None:
                    mu, sd = float(ref.mean()), float(ref.std()) or 1.0
                else:
                    mu, sd = 0.1, 0.1
                cos[got] = (raw - mu_s) / sd_s * sd + mu
                stand_in[got] = True
        # the retrieval core over the corpus (``search/core.py``): both lists within the
        # scope's rows, fused with ``[recall]``'s constants, then its MaxSim stage
        cfg = self.config.recall
        seen = alive if mask is None else alive & mask[:n]
        ranking = core.MaxSim(cfg.rerank_candidates, cfg.context_share).dense(
            core.dense(bm, cos, seen, seen & (have | stand_in), core.Fusion.of(cfg),
                       cfg.candidates), c.tok, c.tok_n, qtok,
            lambda rows: self.neighbours(c, rows, seen), rarity(c, qwords),
            *self._kept(c, qtok))
        fused, bm25_rank, vec_rank = ranking.fused, ranking.lexical_rank, ranking.vector_rank
        floor = self.embedder.threshold("similarity", self.config.recall.min_cosine)
        return Hits(c, fused, bm, bm25_rank, cos, vec_rank, stand_in, floor,
                    pending=int((alive & ~have).sum()))

    def _lexical(self, c: Corpus, query: str) -> np.ndarray:
        """Every row's BM25 for ``query``, kept while the corpus's rows are the same
        (``Bm25.state``) for the last ``LEXICAL_CACHE``
        questions: a question asked again while vectors arrive (a backlog draining: the
        answer cannot be sent again) read every posting of its words again, ~10 ms at
        100,000 rows. Read only: callers never write into it."""
        b = c.bm25
        key = (id(c), query)
        got = self._bm25_of.get(key)
        if got is not None and got[0] == b.state:
            self._bm25_of.move_to_end(key)
            return got[1]
        out = core.Bm25Lexical(b, text_terms).scores(query)
        self._bm25_of[key] = (b.state, out)
        while len(self._bm25_of) > LEXICAL_CACHE:
            self._bm25_of.popitem(last=False)
        return out

    def _kept(self, c: Corpus, qtok: np.ndarray | None) -> tuple[late.Kept | None, int]:
        """The MaxSim terms kept for this question's tokens against ``c`` (``late.Kept``),
        and how many rows it may hold; a new store when the corpus's token vectors changed."""
        if qtok is None or not len(qtok):
            return None, 0
        key = (id(c), qtok.tobytes())
        got = self._kept_best.get(key)
        if got is None or got[0] != c.tok_epoch:
            got = self._kept_best[key] = (c.tok_epoch, late.Kept(len(qtok)))
            while len(self._kept_best) > COSINE_CACHE:
                self._kept_best.popitem(last=False)
        else:
            self._kept_best.move_to_end(key)
        return got[1], max(KEPT_FLOATS // len(qtok), 1)

    def neighbours(self, c: Corpus, rows: np.ndarray, seen: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``(row, neighbour)`` pairs for the MaxSim stage: the turn that carries each of
        ``rows`` on in its session — the same speaker's turn right before or after it, or
        with one turn of another speaker between ("guess who rang, Noor" / "no!" / "she's
        moving to Tromsø"; a reply of more than ``SHORT_REPLY_WORDS`` words ends the news).
        Only conversation turns (a user's or an assistant's message), and only neighbours
        within ``seen`` (the caller's scope: a row it may not see lends nothing). Bounded:
        ``NEIGHBOUR_SCAN`` rows on each side (rows of other sessions that arrived in between
        are passed over), array operations over them; each row's speaker read once."""
        n = c.n
        none = np.zeros(0, dtype=np.int64)
        if n == 0 or not len(rows):
            return none, none
        rows = np.asarray(rows, dtype=np.int64)
        codes = np.frombuffer(c.codes, dtype=np.int32, count=n)
        alive = c.alive()
        k = len(rows)
        at = np.arange(k)
        offs = np.arange(1, NEIGHBOUR_SCAN + 1)
        src: list[np.ndarray] = []
        dst: list[np.ndarray] = []
        for step in (-1, 1):
            idx = rows[:, None] + step * offs[None, :]
            inside = (idx >= 0) & (idx < n)
            idx = np.clip(idx, 0, n - 1)
            same = inside & (codes[idx] == codes[rows][:, None]) & alive[idx]
            count = np.cumsum(same, axis=1)
            j1 = idx[at, np.argmax(same, axis=1)]  # the session's next turn that way
            j2 = idx[at, np.argmax(same & (count == 2), axis=1)]  # ... and the one after
            has1, has2 = count[:, -1] >= 1, count[:, -1] >= 2
            spk, short = self._speakers(c, np.concatenate([rows, j1[has1], j2[has2]]))
            me, s1, s2 = spk[rows], spk[j1], spk[j2]
            turn = me >= 0
            nb = np.where(has1 & turn & (s1 == me), j1,
                          np.where(has2 & turn & (s1 >= 0) & short[j1] & (s2 == me), j2, -1))
            ok = nb >= 0
            ok[ok] = seen[nb[ok]]
            src.append(rows[ok])
            dst.append(nb[ok])
        return np.concatenate(src), np.concatenate(dst)

    def follow_ups(self, c: Corpus, fused: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """``fused`` with the later follow-ups of its best ``FOLLOW_TOP`` rows lifted to just
        below them: a later turn of the same speaker that says at least ``FOLLOW_SHARED`` and
        ``FOLLOW_SHARE`` of a best row's rarest words (by their idf; the words each turn says,
        its stamp and name left out) and updates it (``updates.changes``: names a value the
        row does not, or says a change). What a value became is often said in other words
        than the question's ("where is the reunion now?" / "the farmhouse cancelled on us, i
        got the mill instead"), and without a pattern a rule could read; it names the old
        statement's subject by its rare words, and it is the same person's. A turn that
        comes back to the subject in the same terms is not lifted: it would take a place
        near the top and tell nothing the row does not. Only rows within ``seen`` (the
        caller's scope) follow up or are followed up. Bounded: ``FOLLOW_TERMS`` words of each
        best row, each held by at most ``FOLLOW_DF`` of the rows (their postings are read),
        and ``FOLLOW_LOOK`` candidates of each read."""
        n = c.n
        top = np.flatnonzero(seen[:n] & (fused[:n] > 0))
        if len(top) < 2 or FOLLOW_TOP <= 0:
            return fused
        if len(top) > FOLLOW_TOP:
            top = top[np.argpartition(-fused[top], FOLLOW_TOP)[:FOLLOW_TOP]]
        top = top[np.argsort(-fused[top], kind="stable")]
        spk = self._speakers(c, top)[0]
        top = top[spk[top] >= 0]  # conversation turns only
        at = np.frombuffer(c.at, dtype=np.float64, count=n)
        bm = c.bm25
        cap = max(FOLLOW_DF_MIN, int(FOLLOW_DF * bm.live))
        # every best row's rare words' postings at once: (which best row, row, the word's idf)
        src_l: list[np.ndarray] = []
        val_l: list[float] = []
        cnt_l: list[int] = []
        total = np.zeros(len(top), dtype=np.float64)  #: each best row's own weight
        rare: list[list[tuple[str, float]]] = []  #: each best row's rare words, their idf
        for i, r in enumerate(top.tolist()):
            terms = sorted((df, t) for t in self._said(c, r).terms
                           if 2 <= (df := bm.df(t)) <= cap)[:FOLLOW_TERMS]
            rare.append([])
            for _df, t in terms:
                src_l.append(bm.postings(t))
                w = bm.idf(t)
                val_l.append(w)
                cnt_l.append(i)
                total[i] += w
                rare[i].append((t, w))
        if not src_l:
            return fused
        sizes = [len(x) for x in src_l]
        rows = np.concatenate(src_l).astype(np.int64)
        vals = np.repeat(np.array(val_l), sizes)
        who = np.repeat(np.array(cnt_l, dtype=np.int64), sizes)
        rows = np.minimum(rows, n - 1)  # (postings never pass the corpus; bounded anyway)
        keep = (rows != top[who]) & seen[rows] & (at[rows] > at[top[who]])
        rows, vals, who = rows[keep], vals[keep], who[keep]
        if not len(rows):
            return fused
        key, inv = np.unique(who * n + rows, return_inverse=True)
        score = np.bincount(inv, weights=vals)  # (a word anywhere in the row, stamp included)
        bi, fr = key // n, key % n
        ok = score >= FOLLOW_SHARE * total[bi]
        if not ok.any():
            return fused
        bi, fr, score = bi[ok], fr[ok], score[ok]
        same = self._speakers(c, fr)[0][fr] == spk[top[bi]]
        bi, fr, score = bi[same], fr[same], score[same]
        out = fused
        taken = np.zeros(len(top), dtype=np.int64)
        looked = np.zeros(len(top), dtype=np.int64)
        for k in np.lexsort((-score, bi)).tolist():  # each best row's best follow-ups first
            i, f = int(bi[k]), int(fr[k])
            if taken[i] >= FOLLOW_MAX or looked[i] >= FOLLOW_LOOK:
                continue
            looked[i] += 1
            # what it says of the row's rare words, exactly (not its stamp's), and whether
            # what it adds changes a value
            has = self._said(c, f).terms
            shared = [w for t, w in rare[i] if t in has]
            if len(shared) < FOLLOW_SHARED or sum(shared) < FOLLOW_SHARE * total[i] \
                    or not updates.changes(self._said(c, int(top[i])), self._said(c, f),
                                           {t for t, _ in rare[i]}, FOLLOW_SHARED):
                continue  # (the subject again in the same terms: nothing changed)
            taken[i] += 1
            lift = float(fused[top[i]]) * FOLLOW_LIFT
            if out[f] < lift:
                if out is fused:
                    out = fused.copy()
                out[f] = lift
        return out

    def _said(self, c: Corpus, row: int) -> updates.Said:
        """What a row says (``updates.said``: its words, values, change words; its text never
        changes: kept per row, a bounded number of rows)."""
        key = (id(c), row)
        got = self._row_said.get(key)
        if got is None or got[0] != c.texts[row]:
            got = self._row_said[key] = (c.texts[row], updates.said(c.texts[row]))
            while len(self._row_said) > ROW_TERMS:
                self._row_said.popitem(last=False)
        return got[1]

    def _repeat_keys(self, c: Corpus, rows: np.ndarray) -> np.ndarray:
        """Each row's words as ``said_again`` compares them: a hash of its words in order,
        lower-cased, its stamp and name left out; 1: no word of its own (stop words only);
        read for ``rows`` not read before (a row's text never changes)."""
        got = self._said_keys[c] = _grown(self._said_keys.get(c), c.n, 0, np.int64)
        for r in np.unique(rows[got[rows] == 0]).tolist():
            head = _TURN_HEAD.sub("", c.texts[r][:updates.READ_CHARS], count=1)
            words = said_words(head)  # lower-cased, in order
            own = any(w not in STOPWORDS for w in words)
            got[r] = (hash(" ".join(words)) | 2) if own else 1  # never 0 or 1 when own
        return got

    def _speakers(self, c: Corpus, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's speaker number (role and name; -2: not a conversation turn) and whether
        it is a short reply, read from the entries of ``rows`` not read before."""
        old = self._turns.get(c)
        spk = _grown(old[0] if old else None, c.n, -1, np.int32)
        short = _grown(old[1] if old else None, len(spk), False, np.bool_)
        self._turns[c] = (spk, short)
        for r in np.unique(rows[spk[rows] == -1]).tolist():
            e = self.entry_at(c, r)[0]
            if e is None or e.type != "message" or e.role not in ("user", "assistant") \
                    or e.tool_calls:
                spk[r] = -2
                continue
            head = c.texts[r][:400]
            # the speaker: the role, and the name the entry carries or its text opens with
            # ("Noor: ..."; three friends in one chat are one role)
            name = e.name or ((m.group(1) or "") if (m := _NAMED.match(head)) else "")
            spk[r] = self._speaker_of.setdefault((e.role, name), len(self._speaker_of))
            said = _LEAD.sub("", head, count=1)  # its words, not stamp or name
            short[r] = len(said.split(None, SHORT_REPLY_WORDS)) <= SHORT_REPLY_WORDS
        return spk, short

    def _cosines(self, c: Corpus, vec: np.ndarray, have: np.ndarray) -> np.ndarray:
        """Each row's cosine with the question vector ``vec`` (0 for rows without a vector):
        one matrix-vector product over the corpus (no copy of the matrix), or, for a question
        asked again, over the rows that arrived or got their vector since (the last
        ``COSINE_CACHE`` questions' cosines are kept, ~5 bytes a row each)."""
        return self._cosines_many(c, [vec], have)[0]

    def _cosines_many(self, c: Corpus, vecs: list[np.ndarray], have: np.ndarray
                      ) -> list[np.ndarray]:
        """``_cosines`` of several question vectors (a question's facets): the ones not kept
        are computed together, one pass over the matrix for all of them."""
        assert c.vec is not None
        n = len(have)
        out: list[np.ndarray | None] = [None] * len(vecs)
        todo: list[tuple[int, np.ndarray, tuple[int, bytes]]] = []
        for i, v in enumerate(vecs):
            v = np.asarray(v, dtype=np.float32)
            key = (id(c), v.tobytes())
            got = self._cos.get(key)
            if got is not None and got[0] == c.vec_epoch and got[1] <= n:
                _epoch, n0, had, old = got
                self._cos.move_to_end(key)
                cos = np.zeros(n, dtype=np.float32)
                cos[:n0] = old
                rows = np.flatnonzero(have[:n0] & ~had)
                new = np.flatnonzero(have[n0:]) + n0
                rows = np.concatenate([rows, new]) if len(new) else rows
                if len(rows):
                    cos[rows] = c.vec[rows] @ v
                out[i] = self._keep(c, key, cos, have)
            else:
                todo.append((i, v, key))
        if todo:
            many = np.asarray(c.vec.matmul(n, np.stack([v for _, v, _ in todo], axis=1)),
                              dtype=np.float32)
            for k, (i, _v, key) in enumerate(todo):
                out[i] = self._keep(c, key, np.ascontiguousarray(many[:, k]), have)
        return [o for o in out if o is not None]

    def _keep(self, c: Corpus, key: tuple[int, bytes], cos: np.ndarray,
              have: np.ndarray) -> np.ndarray:
        cos[~have] = 0.0
        self._cos[key] = (c.vec_epoch, len(have), have.copy(), cos.copy())
        while len(self._cos) > COSINE_CACHE:
            self._cos.popitem(last=False)
        return cos

    async def search(self, caller: Caller, query: str, limit: int,
                     session_id: str | None = None) -> list[dict[str, Any]]:
        """``memman_memory_search`` type ``session``: the caller's session entries (the user's,
        within the tenant), best first, through the same retriever as the window. Across
        sessions the scope decides (``scope.across_mask``: not private, recall on, not
        forgotten); with ``session_id`` (the caller's own session) that session's entries. A
        huge query is ranked by its excerpt (``words.excerpt``)."""
        query = core.question(query)
        vecs = await self.question_vectors(query)
        self.settle()
        c = self.corpora.get(corpus_key(caller.user_id, caller.tenant_id))
        if c is None:
            return []
        if self.embedder.local:
            await self._prepare_stand_ins(c)
        if session_id is not None:
            s = self.sessions.by_id.get(session_id)
            if s is None or not caller.owns(s.meta.user_id, s.meta.tenant_id):
                return []
            mask = c.alive() & c.of_session(session_id) & (
                np.frombuffer(c.private, dtype=np.int8, count=c.n) == 0)
        else:
            mask = across_mask(self, c, caller.asking(None))
        hits = self.retrieve_facets(c, query, vecs, mask)  # the scope before ranking
        out: list[dict[str, Any]] = []
        for row in hits.order(mask):
            if len(out) >= limit:
                break
            if not hits.related(row):
                continue
            e, _s = self.entry_at(c, row)
            if e is None:
                continue
            out.append({"id": e.id, "session_id": c.sids[row], "role": e.role,
                        "text": e.content, "created_at": e.created_at,
                        "score": float(hits.fused[row]), "parts": hits.parts(row)})
        return out

    def session_of_entry(self, caller: Caller, entry_id: int) -> Session | None:
        """The caller's session (the user's within the tenant) that holds entry ``entry_id``
        (None if none does)."""
        self.settle()
        c = self.corpora.get(corpus_key(caller.user_id, caller.tenant_id))
        row = c.row_of.get(entry_id) if c is not None else None
        if c is None or row is None or entry_id in c.remote:
            return None
        s = self.sessions.by_id.get(c.sids[row])
        if s is not None and caller.owns(s.meta.user_id, s.meta.tenant_id) and entry_id in s.by_id:
            return s
        return None

    def remote_entry(self, caller: Caller, entry_id: int) -> Entry | None:
        """An entry of the caller's session on another host, as recalled here (or None)."""
        got = self._remote_in.get(entry_id)
        if got is None or not caller.owns(got[1].user_id, got[1].tenant_id):
            return None
        return got[0].remote.get(entry_id)

    def _stand_ins(self, c: Corpus, missing: np.ndarray) -> None:
        """Static vectors for rows that arrived since ``_prepare_stand_ins`` ran (while the
        read awaited): the newest first, at most ``STATIC_INLINE`` (bounded work on the event
        loop; the rest rank by BM25 alone)."""
        todo = np.flatnonzero(missing[c.stand_in_from:] & ~c.has_svec[c.stand_in_from: c.n])
        todo = (todo + c.stand_in_from)[::-1][:STATIC_INLINE]
        if not len(todo):
            return
        vecs = self.embedder.cached([c.texts[r] for r in todo.tolist()])
        if vecs is None:
            return
        if c.svec is None or c.svec.shape[1] != vecs.shape[1]:
            c.svec = Blocks(len(c.has_svec), (vecs.shape[1],), np.float16)
            c.has_svec[:] = False
        c.svec[todo] = vecs
        c.has_svec[todo] = True
        c.changes += 1

    # --- the background embedder -------------------------------------------------------------
    # --- the recall index as a source of the embedding queue (``search/embed_queue.py``) --
    name = "recall"

    def waiting(self) -> int:
        p = self._pending
        return len(p.queue) + p.inflight + sum(len(e) for _, e in self._incoming)

    async def embed_next(self) -> bool:
        """One batch of the rows waiting for their vectors (and token vectors: one pass gives
        both), after indexing what arrived (BM25 rows: searchable at once); False when none
        is waiting (or the embedder is off or failing: they wait for the next wake)."""
        if not self._loaded.is_set():
            return False  # the start's rows first (``_load_rows`` wakes the queue after)
        p = self._pending
        await self.settle_sliced(paced=True)
        if not p.queue:
            if self._unsaved or self._unsaved_tok:
                await self._save()  # the last rows were texts embedded already
            return False
        if not self.embedder.enabled:
            return False
        # the search model is loaded as soon as there is something to embed (in a thread,
        # seconds the first time), not by the first read after a burst
        await self.embedder.search_ready()
        batch: list[tuple[Corpus, int, int]] = []
        tokens = self.embedder.late  # token vectors come from the same pass
        while p.queue and len(batch) < self.config.recall.embed_batch:
            c, eid = p.queue.popleft()
            row = c.row_of.get(eid)
            if row is None or (c.has_vec[row] and (c.tok_n[row] or not tokens)):
                continue
            known = self._known_vector(c.texts[row], tokens)
            if known is not None:  # the same text was embedded already
                self._set(c, eid, row, self.embedder.model_id, *known)
                p.embedded += 1
                continue
            batch.append((c, eid, row))
        p.inflight = len(batch)  # taken off the queue: still pending while it waits
        if batch:
            await self._calm()
        # a text embedded meanwhile, or asked as a question while the batch waited (a user's
        # message, then the window it asks for), takes that pass
        todo = []
        for c, eid, row in batch:
            if c.row_of.get(eid) != row:
                continue  # removed meanwhile
            known = self._known_vector(c.texts[row], tokens) or self._asked_vector(
                c.texts[row], tokens)
            if known is None:
                todo.append((c, eid, row))
                continue
            self._set(c, eid, row, self.embedder.model_id, *known)
            p.embedded += 1
        batch = todo
        if not batch:
            p.inflight = 0
            if not p.queue and (self._unsaved or self._unsaved_tok):
                await self._save()
            return True
        p.inflight = len(batch)
        model = self.embedder.model_id
        mark = self.background.requests()
        t0 = time.perf_counter()
        toks: list[tuple[np.ndarray, int]] | list[None] = [None] * len(batch)
        vecs: np.ndarray | None = None
        try:
            texts = [embedded(c.texts[r]) for c, _, r in batch]
            got = await self.embedder.embed_tokens(texts) if tokens else None
            if got is not None:
                # packed in the worker thread too (~0.2 ms a text): a batch would hold the
                # event loop for tens of milliseconds
                vecs, toks = got[0], await asyncio.to_thread(_pack_all, got[1], got[2])
            else:
                vecs = await self.embedder.embed(texts)
        except Exception:
            log.exception("embedding %d entries for recall failed", len(batch))
            vecs = None
        finally:
            p.inflight = 0
        took = time.perf_counter() - t0
        if vecs is None:  # the embedder is off or failing: at the queue's next turn
            for c, eid, _ in batch:
                p.queue.append((c, eid))
            return False
        if model != self.embedder.model_id:
            return True  # the model changed meanwhile; model_changed re-queued all
        for (c, eid, row), v, t in zip(batch, vecs, toks, strict=True):
            if c.row_of.get(eid) == row:
                self._set(c, eid, row, model, v, t)
        p.embedded += len(batch)
        rate = len(batch) / max(took, 1e-6)
        p.rate = rate if not p.rate else 0.8 * p.rate + 0.2 * rate
        if len(self._unsaved) + len(self._unsaved_tok) >= 256 or not p.queue:
            await self._save()
        if p.embedded - self._trimmed_at >= TRIM_EVERY or not p.queue:
            self._trimmed_at = p.embedded
            await release_memory()
        # a burst of requests (adds from many clients) comes first: yield as the background
        # share would; a trickle of requests does not slow the backlog
        busy = self.background.requests() - mark
        if busy > BUSY_RATE * took:
            share = max(self.config.limits.background_share, 0.01)
            end = time.monotonic() + took * (1 - share) / share
            while (left := end - time.monotonic()) > 0:
                # the entries arriving meanwhile are indexed (paced), not left for the first
                # read after the burst
                await asyncio.sleep(min(left, CALM_PROBE_S))
                await self.settle_sliced(paced=True)
        return True

    def _set(self, c: Corpus, eid: int, row: int, model: str, v: np.ndarray,
             packed: tuple[np.ndarray, int] | None) -> None:
        """A row's vector (and token vectors), kept in memory and queued for the file."""
        c.set_vec(row, v)
        self._remember(c.texts[row], c, row)
        self._unsaved.append((c, eid, c.sids[row], model, v))
        if packed is not None:
            c.set_tok(row, *packed)
            self._unsaved_tok.append((c, eid, c.sids[row], model, *packed))

    def _known_vector(self, text: str, tokens: bool
                      ) -> tuple[np.ndarray, tuple[np.ndarray, int] | None] | None:
        """The vector (and packed token vectors, when ``tokens`` are wanted) a row with the
        same text already has."""
        got = self._by_text.get(text)
        if got is None:
            return None
        c, row = got
        if row < c.n and c.has_vec[row] and c.texts[row] == text and c.vec is not None:
            if not tokens:
                return c.vec[row].copy(), None
            if c.tok is not None and c.tok_n[row]:
                return c.vec[row].copy(), (c.tok[row].copy(), int(c.tok_n[row]))
            return None
        del self._by_text[text]
        return None

    def _asked_vector(self, text: str, tokens: bool
                      ) -> tuple[np.ndarray, tuple[np.ndarray, int] | None] | None:
        """The vector (and packed token vectors) of a question whose text is ``text`` as the
        search model embeds it (``query_vectors`` kept its pass: a user's message is asked as
        the question of the next window, then embedded as an entry)."""
        got = self._asked.pop((self.embedder.model_id, embedded(text)), None)
        if got is None:
            return None
        vec, toks, pieces = got
        return vec.copy(), (_pack_all([toks], [pieces])[0] if tokens else None)

    def _remember(self, text: str, c: Corpus, row: int) -> None:
        self._by_text[text] = (c, row)
        while len(self._by_text) > KNOWN_TEXTS:
            self._by_text.popitem(last=False)

    async def _calm(self) -> None:
        """Wait while requests arrive faster than ``BUSY_RATE`` a second (a burst of adds is
        served first; a client asking one question after another is not a burst)."""
        for _ in range(1200):  # bounded: at most a minute of waiting per batch
            before, t0 = self.background.requests(), time.monotonic()
            await asyncio.sleep(CALM_PROBE_S)
            # meanwhile the burst's entries are indexed as they arrive (paced)
            await self.settle_sliced(paced=True)
            took = max(time.monotonic() - t0, CALM_PROBE_S)
            if (self.background.requests() - before) / took < BUSY_RATE:
                return

    async def _save(self) -> None:
        if self._unsaved_tok:
            toks, self._unsaved_tok = self._unsaved_tok, []
            live_t = [(eid, sid, m, p, k) for c, eid, sid, m, p, k in toks if eid in c.row_of]
            if live_t and self._tok_store is not None:
                try:
                    await self._tok_store.save_tokens(live_t)
                except Exception:
                    log.warning("storing %d token vectors failed; they are computed again "
                                "after a restart", len(live_t), exc_info=True)
        if not self._unsaved:
            return
        batch, self._unsaved = self._unsaved, []
        live = [(eid, sid, m, v) for c, eid, sid, m, v in batch if eid in c.row_of]
        if live:
            try:
                await self.storage.save_vectors(live)
            except Exception:
                log.warning("storing %d recall vectors failed; they are re-embedded after a "
                            "restart", len(live), exc_info=True)

    async def drained(self, timeout: float = 60.0) -> bool:
        """Wait until no vector is pending (tests and benchmarks)."""
        end = time.monotonic() + timeout
        while not self._loaded.is_set() or (self._pending.queue or self._pending.inflight or self._unsaved
               or self._unsaved_tok or self._incoming) and self.embedder.enabled:
            if time.monotonic() > end:
                return False
            await asyncio.sleep(0.02)
        return True


def _grown(col: np.ndarray | None, n: int, fill: Any, dtype: Any) -> np.ndarray:
    """A per-row column read lazily (``fill``: not read yet) holding at least ``n`` rows:
    ``col`` itself when it does, else a copy of it with room for a quarter more."""
    if col is not None and len(col) >= n:
        return col
    out = np.full(max(n, 64) * 5 // 4, fill, dtype=dtype)
    if col is not None:
        out[: len(col)] = col
    return out


def rarity(c: Corpus, words: list[str] | None) -> np.ndarray | None:
    """Each question token's weight in the MaxSim sum: the BM25 idf of the word it is part
    of in this corpus, over the idf of a word no row has (1: rare; near 0: in most rows). A
    speaker's name opens every one of their turns ("Chidi: lol"): matched by all of them
    alike, it decides nothing, yet a short turn keeps it whole where a long one averages it
    into a token mean, so unweighted it ranked small talk above the answer (docs/decisions.md,
    "Evidence recall across sessions")."""
    if not words or not any(words):
        return None
    top = math.log(1.0 + (max(c.bm25.live, 1) + 0.5) / 0.5)
    out = np.ones(len(words), dtype=np.float32)
    for i, w in enumerate(words):
        ts = text_terms(w) if w else []
        if ts:
            out[i] = max(c.bm25.idf(t) for t in ts) / top
    return out


def _pack_all(tokens: list[np.ndarray], pieces: list[list[str]]
              ) -> list[tuple[np.ndarray, int]]:
    """Each text's packed token vectors, its leading speaker name's tokens kept apart."""
    return [late.pack(t, late.head(p)) for t, p in zip(tokens, pieces, strict=True)]


_CLAUSE = re.compile(r"[.?!;:]\s+|,\s+|\s+(?:and|also|plus|as well as)\s+", re.I)
FACET_MIN_WORDS = 14  #: a question shorter than this is one facet
MAX_FACETS = 12


def facets(query: str) -> list[str]:
    """The whole question first, then its clauses when it is long enough to ask for several
    things (each with an informative word)."""
    out = [query]
    if len(query.split()) < FACET_MIN_WORDS:
        return out
    for clause in _CLAUSE.split(query[:4000]):
        clause = clause.strip(" ()")
        if text_terms(clause) and clause not in out:
            out.append(clause)
        if len(out) > MAX_FACETS:
            break
    return out
