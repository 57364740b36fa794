"""Q&A cycles (the Q&A-cycle design): exchanges and the rolling summary (pure helpers).

The engine's ``finalize`` uses these: an answer over ``answer_max_bytes`` is condensed to about
``answer_target_bytes``; at most ``max_exchanges`` exchanges are kept, the oldest folding into the
rolling summary, which is condensed to ``summary_target_bytes`` once it passes
``summary_max_bytes``.
"""

from __future__ import annotations

from memman_daemon.engine import extractive, facts
from memman_daemon.model import Entry, Exchange, Session

TOOL_FACT_BYTES = 400  #: facts of an exchange's tool results kept in the rolling summary


def format_exchange(x: Exchange, s: Session | None = None) -> str:
    """Q, A, and the fact lines of the exchange's tool results (so the rolling summary keeps
    what tools found, not only what was said)."""
    out = f"Q: {x.question}\nA: {x.answer}\n"
    if s is None or not x.last_id:
        return out
    picks = []
    for e in s.entries:
        if e.id < x.first_id or e.role != "tool":
            continue
        if e.id > x.last_id:
            break
        cands = facts.analyse(e.content, structured=True)
        picks += extractive.picks_of(e, cands, min_salience=0.5)
    chosen, _ = extractive.choose(picks, TOOL_FACT_BYTES, lambda t: len(t.encode()))
    return out + "".join(extractive.line(p) for p in chosen)


def cycle_entries(s: Session) -> list[Entry]:
    """Entries added since the current cycle began (newest last)."""
    start = s.meta.cycle.start_id
    out: list[Entry] = []
    for e in reversed(s.entries):
        if e.id < start:
            break
        out.append(e)
    out.reverse()
    return out


def current_cycle(s: Session) -> dict:
    entries = cycle_entries(s)
    question = s.meta.cycle.user_question
    for e in entries:
        if e.role == "user" and e.type == "message":
            question = e.content
            break
    return {"user_question": question,
            "agent_message_ids": [e.id for e in entries if e.role != "user"],
            "final_answer": s.meta.cycle.final_answer, "start_id": s.meta.cycle.start_id}
