"""Whether a later turn of a conversation updates an earlier one on the same subject: says a
value changed ("we moved the trip to May" after "the trip is in April", "the farmhouse
cancelled on us, i got the mill instead", "the library said no but the ferry company offered
me the job") rather than coming back to the subject in the same terms ("the trip in April,
can't wait") or repeating a sentence of it beside other news. Read from the text alone,
cheaply, once per turn (``said``): sentence by sentence, the words said (a leading time
stamp and speaker name left out), the values named (numbers, capitalized names in
mid-sentence), and whether a word marks a change or a negation. The recall index's
``follow_ups`` lifts only a turn that updates (``changes``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memman_daemon.search.words import terms

#: a leading time stamp in brackets, or in parentheses around a span with a digit
#: ("[Tue 5 Mar 2024 18:41] ", "(3:05 pm, 12 June 2023) ")
_STAMPED = re.compile(r"^\s*(?:\[[^\]\n]{1,48}\]|\([^)\n]{0,47}\d[^)\n]{0,47}\))\s*")
#: ... then a speaker's name and a colon (one to three capitalized words) within a turn's
#: first characters, after whatever stamp a client wrote in another shape ("12/06/2023, 15:05
#: - Ravi: "): what comes before it is not what the turn says
_NAME = re.compile(r"^.{0,48}?(?<![\w'-])[A-ZÀ-ÖØ-Þ][\w'-]{0,23}(?: [A-ZÀ-ÖØ-Þ][\w'-]{0,23}){0,2}"
                   r":\s", re.S)
_SENTENCE = re.compile(r"[^.!?;\n]+[.!?;\n]*")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
#: words that mark a value as changed, in English: a correction ("actually", "correction"),
#: a replacement ("instead", "switched", "changed"), a new state ("now", "no longer",
#: "anymore"), a plan moved or called off ("moved", "postponed", "rescheduled",
#: "cancelled"). Short on purpose: each is said of a change in any subject, so none is tied
#: to one kind of fact; a change said without one of them still counts by a new value
CHANGE_WORDS = frozenset("""actually correction instead switched changed change now anymore
longer moved postponed rescheduled cancelled canceled""".split())
#: a negation ("they said no", "it's not happening"): it turns what an earlier turn without
#: one said around, whatever the subject
NEGATIONS = frozenset("no not never nothing nobody none".split())
#: how much of a turn is read (a turn's news is in its opening; a pasted megabyte is not read)
READ_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence of a turn."""

    terms: frozenset[str]  #: its indexed words (``search.words.terms``)
    values: frozenset[str]  #: the values it names, lower-cased: numbers, mid-sentence names
    marked: bool  #: it uses a word of ``CHANGE_WORDS``
    negated: bool  #: it uses a negation (``NEGATIONS``, or a word ending in "n't")


@dataclass(frozen=True, slots=True)
class Said:
    """What a turn says, for comparing it with another turn of the same speaker."""

    terms: frozenset[str]  #: its indexed words, its stamp and name left out
    words: frozenset[str]  #: every word of its text, lower-cased (stamp and name in)
    sentences: tuple[Sentence, ...]
    negated: bool  #: one of its sentences is


def said(text: str) -> Said:
    """``text`` read for ``changes``, from its first ``READ_CHARS`` characters."""
    text = text[:READ_CHARS]
    body = _STAMPED.sub("", text, count=1)
    if m := _NAME.match(body):
        body = body[m.end():]
    out = tuple(_sentence(s.group(0)) for s in _SENTENCE.finditer(body))
    return Said(frozenset().union(*(s.terms for s in out)),
                frozenset(w.lower() for w in _WORD.findall(text)), out,
                any(s.negated for s in out))


def _sentence(text: str) -> Sentence:
    values: set[str] = set()
    lower: set[str] = set()
    for k, m in enumerate(_WORD.finditer(text)):
        w = m.group(0)
        lw = w.lower()
        lower.add(lw)
        if any(ch.isdigit() for ch in w):
            values.add(lw)
        elif k and w[:1].isupper() and not w.isupper() and w[:2] not in ("I'", "I’"):
            values.add(lw)  # "Ardennes", "Mill Lane", "May"; not "I'm", not "YES"
    negated = bool(lower & NEGATIONS) or any(w.endswith(("n't", "n’t")) for w in lower)
    return Sentence(frozenset(terms(text)), frozenset(values), bool(lower & CHANGE_WORDS),
                    negated)


def changes(earlier: Said, later: Said, subject: frozenset[str] | set[str],
            shared: int) -> bool:
    """Whether ``later`` updates ``earlier``: what it adds (its sentences that are not a
    repeat of ``earlier``'s words) still names the subject (at least ``shared`` of the words
    in ``subject``), and marks a change, negates where ``earlier`` did not, or names a value
    ``earlier`` does not (a new number, date or name)."""
    added = [s for s in later.sentences if not s.terms <= earlier.terms]
    if len(subject & frozenset().union(*(s.terms for s in added))) < shared:
        return False  # (nothing added, or what is added is about something else)
    return any(s.marked or (s.negated and not earlier.negated)
               or not s.values <= earlier.words for s in added)
