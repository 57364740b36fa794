"""Superseded values: a later entry restating a subject with a new value replaces the old one.

Offline heuristics, applied to fact candidates in log order (limits in docs/engine.md):

* the same ``key:`` (or ``key =``) with another value in a later entry, where both come from the
  same tool (or both from messages); generic keys (``id``, ``type``, ``name``...) are ignored,
  and so is a value of more than ``MAX_VALUE_WORDS`` words (``Ana: see you tomorrow`` is speech);
* "X renamed to Y" / "renamed X to Y": earlier candidates naming X;
* "Y instead of X", "X, not Y" / "not X" in a correction ("I meant", "actually", "correction"):
  earlier candidates naming the old token;
* "<subject> moved / pushed / postponed / changed / switched / bumped ... (from X) to Y", and
  the active voice "we moved the party to Friday": earlier candidates naming X, or naming the
  subject together with a value (or a word of the new value's shape), and not Y;
* a value restated as the one that holds now ("so it's 8:15 now"): as a bare correction;
* a correction that names only the new value ("no, I meant 1.22.6", "actually Friday",
  "correction: EUR", "sorry, 8080"): among the last few entries' candidates, the value of the
  same shape (digits, dots, capitals) most alike the new one (the longest common start, then
  the newest) is the replaced one, and every one of those candidates that holds it is
  replaced.

Bounded work: candidates are found through an index of their words and values (the newest
``SCAN`` that hold the word), never by a scan of the whole log.

The window never presents only an old value: superseded candidates leave summaries, and a kept
original that carries one is marked with the later statement.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from functools import lru_cache

from memman_daemon.engine.facts import STOPWORDS, Candidate, terms

Ref = tuple[int, int]  #: (entry id, candidate index)

_GENERIC_KEYS = frozenset({
    "id", "type", "name", "message", "msg", "level", "time", "timestamp", "ts", "count", "index",
    "line", "file", "code", "data", "result", "results", "value", "text", "content", "role",
    "args", "description", "title", "kind", "uuid", "created_at", "updated_at", "date", "at",
    "took", "duration", "elapsed", "error", "ok", "success", "note", "info", "debug", "warn",
})
_TOKEN = r"[`'\"]?([\w][\w.\-/:@+]*[\w%])[`'\"]?"
_RENAMED = [re.compile(r"\brenam(?:ed|e|ing)\s+(?:from\s+)?" + _TOKEN + r"\s+(?:to|as|into)\s+" + _TOKEN, re.I),
            re.compile(_TOKEN + r"\s+(?:is|was|has been|got|gets|will be)\s+renamed\s+(?:to|as)\s+"
                       + _TOKEN, re.I)]
_INSTEAD = re.compile(_TOKEN + r"\s+instead of\s+" + _TOKEN, re.I)
_CORRECTION = re.compile(r"\b(?:i meant|i mean|actually|correction|sorry|typo)\b", re.I)
_NOT = re.compile(r"\b(?:not|rather than|no longer)\s+(?:the\s+|on\s+|in\s+)?" + _TOKEN, re.I)
_CHANGE = re.compile(
    r"(?P<subj>[\w][\w \-./']{1,60}?)\s+(?:has been\s+|have been\s+|was\s+|were\s+|is\s+|are\s+|got\s+|gets\s+|will be\s+)?"
    r"(?:moved|pushed(?: back)?|postponed|rescheduled|changed|switched|bumped|updated|raised|"
    r"lowered|increased|decreased|reduced|set|slipped|shifted|upgraded|downgraded)\s+"
    r"(?:from\s+(?P<old>.+?)\s+)?to\s+(?P<new>[^,;.!?]+)", re.I)
#: the active voice: "we moved the party to Friday", "I changed the port to 8081" (the object
#: starts with a determiner, so "set to 8080" or "moved to Tuesday" stay the passive pattern's)
_CHANGE_OBJECT = re.compile(
    r"\b(?:moved|pushed|postponed|rescheduled|changed|switched|bumped|updated|raised|lowered|"
    r"increased|decreased|reduced|set|shifted|upgraded|downgraded)\s+"
    r"(?P<subj>(?:the|our|my|your|his|her|their)\s+[\w\-' ]{1,40}?)\s+(?:back\s+|up\s+|down\s+)?"
    r"(?:from\s+(?P<old>[^,;.!?]+?)\s+)?to\s+(?P<new>[^,;.!?]+)", re.I)
#: words each pattern needs (lower case): most lines have none, and the patterns (which may
#: start at any position) cost ~200 µs on a short line, a substring test ~0.1 µs
_CHANGE_VERBS = ("moved", "pushed", "postponed", "rescheduled", "changed", "switched", "bumped",
                 "updated", "raised", "lowered", "increased", "decreased", "reduced", "set",
                 "slipped", "shifted", "upgraded", "downgraded")
_VALUEISH = re.compile(r"\d|[A-Za-z]+[_\-./][A-Za-z0-9]|\b[A-Z]{2,}\b")
_CORRECTED = re.compile(r"\b(?:i meant|i mean|actually|correction|sorry)\b[:,]?\s+(?:it'?s\s+|it is\s+|"
                        r"it should be\s+|that'?s\s+|use\s+|make it\s+)?" + _TOKEN, re.I)
#: a value restated as the one that holds now: "so it's 8:15 now", "it is now 8:15"
_NOW = re.compile(r"\b(?:it'?s|it is|that'?s|that is)\s+(?:now\s+" + _TOKEN + r"|" + _TOKEN
                  + r"\s+now\b)", re.I)
#: a line's leading time stamp and speaker ("[Tue 5 Mar 2024 18:41] Ana: ..."): when it was
#: said and by whom, not values it states (a correction to "8:15" must not replace the time the
#: line was said)
_STAMP = re.compile(r"^\s*\[[^\]\n]{1,48}\]\s*")
_SPEAKER = re.compile(r"^[A-Z][\w.'\-]{0,30}(?: [A-Z][\w.'\-]{0,30})?: ")
_CAPITAL = re.compile(r"^[A-Z]|\s[A-Z]")  #: a name or a day ("Friday", "to Postgres")
_WORDS = re.compile(r"[\w][\w.\-/:@+]*[\w%]|\w")
MAX_VALUE_WORDS = 5  #: a ``key: value`` whose value is longer is a sentence, not a setting
SCAN = 200  #: earlier candidates one change statement looks at, newest first, per word
RECENT = 24  #: candidates a bare correction looks back over (the last few entries)
CACHED = 4096  #: texts whose helpers' answers are kept (``_body``, ``_shapes``, ...)


@dataclass
class Supersession:
    """Incremental: feed entries in log order; ``by`` maps an old candidate to its replacement."""

    by: dict[Ref, tuple[int, str]] = field(default_factory=dict)  #: old -> (entry id, new text)
    new: list[Ref] = field(default_factory=list)  #: refs marked since the caller last drained it
    _kv: dict[tuple[str, str], tuple[int, int, str]] = field(default_factory=dict)
    #: word or value (lower case) -> the candidates holding it, oldest first
    _by_word: dict[str, list[tuple[int, int, Candidate]]] = field(
        default_factory=lambda: defaultdict(list))
    _recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    examined: int = 0  #: earlier candidates looked at so far (bounded: SCAN per statement)

    def feed(self, entry_id: int, cands: list[Candidate], scope: str) -> None:
        for i, c in enumerate(cands):
            # a setting, not speech: "Tom: the baby next door wakes at three" is a transcript
            # line, and a later line of Tom's replaces nothing
            if c.kv is not None and c.kv[0] not in _GENERIC_KEYS \
                    and len(c.kv[1].split()) <= MAX_VALUE_WORDS:
                key = (scope, c.kv[0])
                prev = self._kv.get(key)
                if (prev is not None and prev[0] != entry_id and _norm(prev[2]) != _norm(c.kv[1])
                        and (prev[0], prev[1]) not in self.by):
                    self.by[(prev[0], prev[1])] = (entry_id, c.text)
                    self.new.append((prev[0], prev[1]))
                self._kv[key] = (entry_id, i, c.kv[1])
            for old, new, subject in _changes(c.text):
                self._mark(entry_id, c.text, old, new, subject)
            self._corrected(entry_id, c.text)
        for i, c in enumerate(cands):
            ref = (entry_id, i, c)
            for w in set(_WORDS.findall(c.text[:2000].lower())) | set(c.terms):
                self._by_word[w].append(ref)
            self._recent.append(ref)

    def _corrected(self, entry_id: int, text: str) -> None:
        """A bare correction: the newest recent candidate with a value of the new one's shape."""
        low = text.lower()
        if any(w in low for w in ("meant", "mean", "actually", "correction", "sorry")):
            m = _CORRECTED.search(text)
            new = m.group(1) if m is not None else ""
        elif "now" in low and (m := _NOW.search(text)) is not None:
            new = m.group(1) or m.group(2)
        else:
            return
        if not new or not _VALUEISH.search(new):
            return
        want, new_l = _shape(new), new.lower()
        # the replaced value: of the new one's shape, the most alike (the longest common
        # start: "1.22.5" for "1.22.6", not the linter's "1.57.2" a tool printed in between),
        # the newest among equals; every recent candidate that holds it is replaced (the
        # request, the edit's arguments, the answer that repeated it)
        best: tuple[int, int] | None = None
        old = ""
        holders: list[tuple[int, int, set[str]]] = []
        for pos, (eid, idx, c) in enumerate(reversed(self._recent)):
            self.examined += 1
            if eid == entry_id:
                continue
            vals = {v.lower() for v in _WORDS.findall(_body(c.text))
                    if _VALUEISH.search(v) and _shape(v) == want and v.lower() != new_l}
            if not vals:
                continue
            holders.append((eid, idx, vals))
            for v in vals:
                rank = (_common_start(v, new_l), -pos)
                if best is None or rank > best:
                    best, old = rank, v
        for eid, idx, vals in holders:
            if old in vals and (eid, idx) not in self.by and new_l not in vals:
                self.by[(eid, idx)] = (entry_id, text)
                self.new.append((eid, idx))

    def _mark(self, entry_id: int, text: str, old: str | None, new: str,
              subject: list[str]) -> None:
        new_l = new.lower()
        old_re = re.compile(r"(?<![\w])" + re.escape(old) + r"(?![\w])", re.I) if old else None
        key = old.lower() if old else (subject[0] if subject else "")
        for eid, idx, c in reversed(self._by_word.get(key, [])[-SCAN:]):
            self.examined += 1
            if eid == entry_id or (eid, idx) in self.by:
                continue
            low = c.text.lower()
            if new_l and new_l in low:
                continue
            if old_re is not None:
                hit = bool(old_re.search(c.text))
            else:
                body = _body(c.text)
                hit = bool(subject) and all(w in c.terms for w in subject) and (
                    bool(_VALUEISH.search(body)) or _same_kind(body, new))
            if hit:
                self.by[(eid, idx)] = (entry_id, text)
                self.new.append((eid, idx))


# The helpers below are pure functions of their strings, kept in small caches (a few MB): the
# window runs a supersession over the best past entries of every new question
# (``retrieve.Sources.superseded``), and the same entries' lines come back question after
# question (their values' shapes were ~60 % of that run)
@lru_cache(maxsize=CACHED)
def _body(text: str) -> str:
    """A line without its leading time stamp and speaker."""
    return _SPEAKER.sub("", _STAMP.sub("", text, count=1), count=1)


@lru_cache(maxsize=CACHED)
def _shapes(text: str) -> tuple[tuple[str, str], ...]:
    """Each word of ``text`` past its first, as (shape, lower case), stop words left out."""
    return tuple((_shape(w), low) for w in _WORDS.findall(text)[1:]
                 if (low := w.lower()) not in STOPWORDS)


@lru_cache(maxsize=CACHED)
def _same_kind(text: str, new: str) -> bool:
    """``text`` names a value of the new one's kind (past its first word, which any sentence
    capitalizes): "on Thursday" for "Friday"."""
    want = next((w for w in _WORDS.findall(new) if _named(w)), None)
    if want is None:
        return False
    shape, low = _shape(want), want.lower()
    return any(sh == shape and w != low for sh, w in _shapes(text))


def _common_start(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@lru_cache(maxsize=4 * CACHED)
def _shape(v: str) -> str:
    """A value's shape: digits, capitals and small letters as classes ("1.22.6" -> "9.9.9")."""
    v = re.sub(r"\d+", "9", v)
    v = re.sub(r"[A-Z]+", "A", v)
    return re.sub(r"[a-z]+", "a", v)


def _norm(v: str) -> str:
    return " ".join(v.lower().split()).strip("\"'`,;")


def _named(token: str) -> bool:
    """Only a value or a name can be replaced: "its", "the", "using" never are."""
    return (len(token) > 1 and token.lower() not in STOPWORDS
            and (bool(_VALUEISH.search(token)) or token[:1].isupper()))


@lru_cache(maxsize=CACHED)
def _changes(text: str) -> tuple[tuple[str | None, str, list[str]], ...]:
    """(old token or None, new value, subject words) for each change statement in ``text``
    (kept: callers only read it)."""
    return tuple(_find_changes(text))


def _find_changes(text: str) -> list[tuple[str | None, str, list[str]]]:
    out: list[tuple[str | None, str, list[str]]] = []
    low = text.lower()
    if "renam" in low:
        for rx in _RENAMED:
            for m in rx.finditer(text):
                if _named(m.group(1)):
                    out.append((m.group(1), m.group(2), []))
    if "instead of" in low:
        for m in _INSTEAD.finditer(text):
            if _named(m.group(2)):
                out.append((m.group(2), m.group(1), []))
    if ("not" in low or "rather than" in low or "no longer" in low) and _CORRECTION.search(text):
        for m in _NOT.finditer(text):
            if _named(m.group(1)):
                out.append((m.group(1), "", []))
    if "to" not in low or not any(v in low for v in _CHANGE_VERBS):
        return out
    for rx in (_CHANGE, _CHANGE_OBJECT):
        for m in rx.finditer(text):
            new = m.group("new").strip()
            old = m.group("old")
            subj = [w for w in terms(m.group("subj"))][-2:]
            if rx is _CHANGE_OBJECT and not _VALUEISH.search(new) and not _CAPITAL.search(new):
                continue  # "changed the plan to include Ana's team" names no new value
            if old and _named(old.strip()):
                out.append((old.strip(), new, []))
            elif subj:
                out.append((None, new, subj))
    return out
