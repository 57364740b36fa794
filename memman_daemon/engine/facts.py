"""What a piece of text carries: fact candidates, their salience, and the words search uses.

The context window keeps what a later question needs. Offline, without an LLM, that is judged
from the text itself: an entry is split into *candidates* (prose sentences, lines of tool output
or code, never cut inside a value), and each candidate is scored by what it carries —
identifiers, numbers, dates, names, ``key: value`` pairs, instructions ("from now on", "never",
"must"), decisions and changes ("moved to", "renamed", "instead of"). Chit-chat ("thanks",
"nice", "ok") scores near zero. The rules are plain regular expressions: documented in
docs/engine.md, with their limits.

Everything here is pure and cached by the caller per entry id (entries never change).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memman_daemon.search import words

# --- candidates -----------------------------------------------------------------------------
#: characters of one entry analysed (facts, words, supersession): a huge entry by its head, so
#: one entry costs the event loop tens of ms at most (it is stored and sent whole)
ANALYSE_MAX_CHARS = 16_000
MAX_CANDIDATE_CHARS = 320  #: longer sentences are split at clause boundaries (never mid-word)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9`*-])")
_CLAUSE = re.compile(r"(?<=[;,])\s+")
_CODE_FENCE = re.compile(r"^\s*```")
_ITEM = re.compile(r"(?:[-*+]|\d{1,3}[.)])\s+")  #: a list item's marker: "- ", "2. "


@dataclass(slots=True)
class Candidate:
    """One sentence or line of an entry, kept verbatim if chosen."""

    text: str
    salience: float  #: 0..1, what it carries
    kv: tuple[str, str] | None = None  #: (normalized key, value) for ``key: value`` lines
    #: its words, each once (a tuple: a frozenset of 15 words took 728 bytes, this 160; every
    #: candidate of every analysed entry holds one)
    terms: tuple[str, ...] = ()


def split_candidates(text: str, structured: bool) -> list[str]:
    """Lines for tool output and code (each line is a unit of meaning), sentences for prose.

    Prose wrapped over several lines is joined first, and so is a list item with its indented
    continuation lines: a sentence (or a value) that runs over a line break stays one
    candidate instead of two halves that each miss what the other holds."""
    out: list[str] = []
    para: list[str] = []  #: the prose paragraph or list item being gathered
    item = False  #: ``para`` is a list item (continued only by indented lines)

    def flush() -> None:
        if para:
            text = " ".join(para)
            marker = _ITEM.match(text) if item else None
            head = marker.group(0) if marker else ""  # "2. " is no sentence of its own
            for i, sent in enumerate(_SENTENCE_END.split(text[len(head):])):
                sent = sent.strip()
                if sent:
                    out.extend(_bounded(head + sent if i == 0 else sent))
            para.clear()

    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if _CODE_FENCE.match(line):
            flush()
            in_code = not in_code
            continue
        if not line:
            flush()
            continue
        if structured or in_code:
            out.extend(_bounded(line))
            continue
        if _ITEM.match(line):
            flush()
            para.append(line)
            item = True
            continue
        if para and item and raw[:1].isspace():
            para.append(line)  # a list item's indented continuation, whatever it looks like
            continue
        if _looks_structured(line):
            flush()
            out.extend(_bounded(line))
            continue
        if para and item:
            flush()  # a list item continues only on indented lines
        if not para:
            item = False
        para.append(line)
    flush()
    return out


def _looks_structured(line: str) -> bool:
    # the pattern looks at a bounded head of the line, never at a whole raw line
    return bool(_KV.match(line[:MAX_CANDIDATE_CHARS])) or line.startswith(
        ("-", "*", "|", "{", "}", "[", "$", "#"))


def _bounded(s: str) -> list[str]:
    """Split an over-long sentence at clause boundaries, then at spaces (never inside a word)."""
    if len(s) <= MAX_CANDIDATE_CHARS:
        return [s]
    out: list[str] = []
    cur = ""
    for part in _CLAUSE.split(s):
        if cur and len(cur) + 1 + len(part) > MAX_CANDIDATE_CHARS:
            out.append(cur)
            cur = part
        else:
            cur = f"{cur} {part}" if cur else part
        while len(cur) > MAX_CANDIDATE_CHARS:
            cut = cur.rfind(" ", 0, MAX_CANDIDATE_CHARS)
            if cut <= 0:
                cut = MAX_CANDIDATE_CHARS
            out.append(cur[:cut])
            cur = cur[cut:].lstrip()
    if cur:
        out.append(cur)
    return out


# --- salience ---------------------------------------------------------------------------------
# the value runs to the end of the line (stripped in ``kv_of``): a lazy value followed by
# ``\s*,?$`` backtracked over long runs of spaces (quadratic in the line's length)
_KV = re.compile(r"""^\s*[-*]?\s*["'`]?([A-Za-z_][\w .\-/]{0,40}?)["'`]?\s*[:=][ \t]*(?!//)(.*?\S.*)$""")
_NUMBER = re.compile(r"(?<![A-Za-z])[-+$€£]?\d[\d,._:/]*\s?(?:%|ms|s|kb|mb|gb|tb|k|m|h|x)?\b", re.I)
_IDENT = re.compile(
    r"(?:[A-Za-z0-9]+(?:[_\-][A-Za-z0-9]+)+"  # snake_case, kebab-case, v2-beta
    r"|[a-z]+[A-Z][A-Za-z0-9]*"  # camelCase
    r"|(?:[\w\-]+\.)+[A-Za-z]{1,6}\b"  # file.py, a.b.c, host.example.com
    r"|/[\w.\-]+(?:/[\w.\-]+)+"  # /paths/like/this
    r"|\b[A-Z]{2,}[0-9]*\b"  # EUR, UTC, API, S3
    r"|`[^`]+`"  # `quoted`
    r"|\b[0-9a-f]{7,40}\b)"  # hashes
)
_DATE = re.compile(
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday|\d{4}-\d{2}-\d{2}|"
    r"q[1-4])\b", re.I)
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]{2,}")  #: a capitalized word inside a sentence
_FULL_NAME = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+\b")  #: "Priya Raman", "Ana Silva"
_INSTRUCTION = re.compile(
    r"\b(?:remember|from now on|going forward|always|never|don'?t|do not|must|make sure|"
    r"please use|prefers?|preferred|wants?|likes|hates|shouldn'?t|needs to|important|"
    r"note that|keep in mind|only use|avoid|required?|requires)\b", re.I)
_DECISION = re.compile(
    r"\b(?:moved to|move to|renamed|rename|instead of|switch(?:ed|ing)? to|changed? to|"
    r"replaced? (?:by|with)|decided|decision|we'?ll go with|let'?s use|going with|"
    r"no longer|deprecated|from now|agreed|chose|chosen|pick(?:ed)?|set to|bump(?:ed)? to|"
    r"postponed|rescheduled|pushed (?:back )?to|i meant|correction|actually|root cause|"
    r"the (?:cause|culprit|fix|problem|issue) (?:is|was))\b", re.I)
_CHITCHAT = re.compile(
    r"^(?:(?:ok(?:ay)?|thanks?(?: you)?(?: so much)?|thx|ty|nice|great|cool|perfect|awesome|"
    r"got it|sounds good|sure|yes|yep|yeah|no worries|lol|haha|wow|good|great job|nice one|"
    r"love it|that was quick|you(?:'re| are) the best|cheers|makes sense|alright|all right|"
    r"hmm+|hi|hello|hey|morning|good morning|bye)[\s,.!:)(-]*)+$", re.I)
_ERROR_LINE = re.compile(
    r"^\s*(?:error|fatal|panic|traceback|exception|\w+(?:error|exception)\b|e\d{3,}|"
    r"\[?(?:error|fatal|crit(?:ical)?)\]?[\s:])|^\s*FAIL(?:ED)?\b|\bexit (?:code|status) [1-9]",
    re.I)


def is_chitchat(text: str) -> bool:
    t = text.strip()
    return len(t) < 60 and bool(_CHITCHAT.match(t))


def kv_of(line: str) -> tuple[str, str] | None:
    m = _KV.match(line[:MAX_CANDIDATE_CHARS])
    if not m:
        return None
    key = re.sub(r"[\s\-]+", "_", m.group(1).strip().lower())
    value = m.group(2).rstrip().rstrip(",").strip().strip("\"'`,")
    if not value or len(key) < 2 or key in _NOT_KEYS or len(value) > 200:
        return None
    return key, value


_NOT_KEYS = {"http", "https", "note", "q", "a", "user", "assistant", "system", "tool", "e.g", "i.e"}


def _cued(cues: tuple[str, ...], rx: re.Pattern[str]) -> Callable[[str, str], bool]:
    """``rx.search`` run only when the lower-cased text holds one of ``cues``, a substring of
    every match: a substring test costs ~0.1 µs, these patterns 5-12 µs a line."""
    def search(text: str, low: str) -> bool:
        return any(c in low for c in cues) and rx.search(text) is not None
    return search


def salience(text: str, kv: bool = False) -> float:
    """0..1: how much this candidate carries (identifiers, numbers, dates, names, key: value,
    outcomes, instructions, decisions). Chit-chat scores 0.02; prose with one stray number
    stays under the bar a summary takes (``extractive.MIN_SALIENCE``)."""
    if is_chitchat(text):
        return 0.02
    low = text.lower()
    upper = text != low  # names and capitals need an upper-case letter
    dates = len(_DATE.findall(text)) if any(c in low for c in _DATE_CUES) else 0
    numbers = len(_NUMBER.findall(text)) if _DIGIT.search(text) else 0
    full = len(_FULL_NAME.findall(text)) if upper else 0
    names = len(_NAME.findall(text)) if upper else 0
    if 0.7 * numbers + 0.7 * dates + 1.0 * full + 0.4 * names >= 2.0:
        values = 2.0  # the cap: identifiers cannot add to it
    else:
        idents = len(_IDENT.findall(text)) if _may_name_ident(text, upper) else 0
        values = idents + 0.7 * numbers + 0.7 * dates + 1.0 * full + 0.4 * names
    s = 0.1 + 0.5 * min(values, 2.0) / 2.0
    if kv:
        s += 0.15
    if _has_outcome(text, low):
        s += 0.15
    if _has_instruction(text, low):
        s += 0.25
    if _has_decision(text, low):
        s += 0.25
    if len(text) < 12:
        s *= 0.6
    if _is_code(text):
        s *= 0.55  # source code is dense with identifiers but rarely the fact asked about
    return min(s, 1.0)


#: every alternative of _CODE but the keyword at a line's start needs one of these characters
_CODE_CHARS = "\t:;{}=()\\"
_CODE_START = re.compile(
    r"[+-]?\s*(?:func|def|class|return|import|package|const|var|let|if|for|else|switch|case|"
    r"type|struct|public|private|static|async|await)\b")
_DIGIT = re.compile(r"\d")


def _is_code(text: str) -> bool:
    """``_CODE.search(text)``; prose without any of its characters only needs the keyword check
    at each line's start (~1 µs instead of ~7)."""
    if any(c in text for c in _CODE_CHARS):
        return _CODE.search(text) is not None
    return any(_CODE_START.match(line) for line in text.split("\n"))


_CODE = re.compile(
    r"(?:^|\t|:\s*)(?:\d+\t|[+-]\t|[+-]?\s*(?:func|def|class|return|import|package|const|var|"
    r"let|if|for|else|switch|case|type|struct|public|private|static|async|await)\b)"
    r"|[;{}]\s*$|:=|=>|\)\s*\{|\b(?:err|nil|self|this)\b.*[(){}]|\\n\+", re.M)


_OUTCOME = re.compile(
    r"\b(?:success(?:ful(?:ly)?)?|succeeded|passed|failed|failure|errors?|exception|denied|"
    r"approved|completed|warning|timed? ?out|crash(?:ed)?|panic|refused|rejected|fixed)\b", re.I)


#: something each kind of identifier needs (a separator, a capital pair, a hex run): most
#: prose lines have none, and _IDENT costs ~18 µs a line
_IDENT_QUICK = re.compile(r"[A-Z]{2}|[a-z][A-Z]|[0-9a-f]{7}")
_HEX_RUN = re.compile(r"[0-9a-f]{7}")


def _may_name_ident(text: str, upper: bool) -> bool:
    """``upper``: the text has an upper-case letter (without one, only a hex run can)."""
    if any(ch in text for ch in "_-./`"):
        return True
    return (_IDENT_QUICK if upper else _HEX_RUN).search(text) is not None


#: substrings every match of these patterns contains (lower case)
_DATE_CUES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
              "dec", "day", "q1", "q2", "q3", "q4", "-")
_has_outcome = _cued(("succe", "pass", "fail", "error", "exception", "denied", "approved",
                      "completed", "warning", "time", "crash", "panic", "refused", "rejected",
                      "fixed"), _OUTCOME)
_has_instruction = _cued(("remember", "from now on", "going forward", "always", "never", "don",
                          "do not", "must", "make sure", "please use", "prefer", "want", "likes",
                          "hates", "shouldn", "needs to", "important", "note that",
                          "keep in mind", "only use", "avoid", "require"), _INSTRUCTION)
_has_decision = _cued(("move", "renam", "instead of", "switch", "change", "replace", "decid",
                       "decision", "go with", "let", "going with", "no longer", "deprecated",
                       "from now", "agreed", "chose", "pick", "set to", "bump", "postponed",
                       "rescheduled", "pushed", "i meant", "correction", "actually",
                       "root cause", "the cause", "the culprit", "the fix", "the problem",
                       "the issue"), _DECISION)


def is_error_line(line: str) -> bool:
    return bool(_ERROR_LINE.search(line))


# --- words for relevance: search/words.py (the retriever's and the window's one tokenizer) --
STOPWORDS = words.STOPWORDS
stem = words.stem
terms = words.terms


def analyse(text: str, structured: bool) -> list[Candidate]:
    """The candidates of one entry's text, each with its salience and words."""
    out = []
    for c in split_candidates(text, structured):
        kv = kv_of(c)
        out.append(Candidate(c, salience(c, kv is not None), kv, tuple(dict.fromkeys(terms(c)))))
    return out
