"""``memman_search``: one search over everything a caller may read, merged in the daemon.

Four sources, each ranked by the retrieval core within the caller's scope before it is merged
(nothing here widens a scope): the user's stored memory (preferences, rules, playbooks,
episodes: the user's own), the scratchpads of the user's sessions in the tenant, the tenant's
business documents, and what the user's sessions in the tenant said (the recall index: never
a private, recall-off or forgotten entry of another session). Their scores mean different
things, so the lists are merged by rank (the core's ``Fusion`` over four lists, ``[memory]
sources_rrf_k``), then one step after ranking, declared as such: ``Coverage``, the share of
the question's words a hit carries (the core's tokenizer and stemmer), which weights the
fused score and drops hits under the caller's floor.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memman_daemon.search.core import Fusion
from memman_daemon.search.words import STOPWORDS, excerpt, stem, words

if TYPE_CHECKING:
    from memman.config import Config
    from memman.scope import Caller
    from memman_daemon.recall.index import RecallIndex
    from memman_daemon.tiers.docs import BusinessDocs
    from memman_daemon.tiers.memory import UserMemory

#: the least share of the question's words a hit carries to be returned (``opts.min_coverage``)
MIN_COVERAGE = 0.25
#: the order of the sources (a tie keeps it): memory, scratchpad, documents, sessions
SOURCES = ("memory", "snippet", "doc", "entry")
RANKING = ("each source ranks its own hits with the retrieval core (user memory: BM25 + "
           "vectors + recency; scratchpad: term score; documents: BM25 + vectors, reranked; "
           "sessions: the recall index, BM25 + vectors + MaxSim); the lists are merged by "
           "reciprocal rank fusion, 1/(k + rank), weighted by the share of the question's words "
           "the hit carries")


@dataclass(frozen=True)
class Coverage:
    """The step after ranking: a hit's fused score times (1 + share of the question's
    distinct word stems it carries) / 2; hits under ``floor`` (or with none) are cut."""

    question: frozenset[str]
    floor: float
    name: str = "coverage"

    @classmethod
    def of(cls, query: str, floor: float) -> Coverage:
        said = _stems(query)
        return cls(frozenset(said - STOPWORDS) or frozenset(said), floor)

    def share(self, text: str) -> float:
        if not self.question:
            return 0.0
        return len(self.question & _stems(text)) / len(self.question)


def _stems(text: str) -> set[str]:
    """The stemmed words of any script (a question in Japanese has words too), of a bounded
    excerpt: a 3 MB hit is compared by its head and tail."""
    return {stem(w) for w in words(excerpt(text))}


async def search_everywhere(caller: Caller, query: str, limit: int, floor: float, *,
                            config: Config, memory: UserMemory, docs: BusinessDocs,
                            recall: RecallIndex) -> dict[str, Any]:
    """The merged hits of the four sources for ``caller`` (user within tenant), best first."""
    user, tenant = caller.user_id, caller.tenant_id
    opts = {"limit": limit}
    stored, working, chunks, said = await asyncio.gather(
        memory.search(user, "", query, opts),
        memory.search(user, "working", query, {**opts, "tenant_id": tenant}),
        docs.search(tenant, query, opts),
        recall.search(caller, query, limit, None))
    lists: list[list[dict[str, Any]]] = [
        [_memory_hit(r, user) for r in stored],
        [{"id": f"snippet:{r['session_id']}#{r['id']}", "text": r["text"],
          "source": f"scratchpad of session {r['session_id']}", "native_score": r["score"]}
         for r in working],
        [{"id": f"doc:{r['doc_id']}", "chunk": f"chunk:{r['chunk_id']}", "text": r["text"],
          "source": f"business document '{r['title']}' of tenant {tenant} (chunk {r['seq']})",
          "native_score": r["score"]} for r in chunks],
        [{"id": f"entry:{r['session_id']}#{r['id']}", "text": r["text"],
          "source": f"{r['role']} in session {r['session_id']} on "
                    f"{time.strftime('%Y-%m-%d', time.gmtime(r['created_at']))}",
          "native_score": r["score"]} for r in said]]
    flat = [(name, h) for name, hits in zip(SOURCES, lists, strict=True) for h in hits]
    fusion = Fusion(k=config.memory.sources_rrf_k)
    fused = fusion.merge({name: [i for i, (n, _h) in enumerate(flat) if n == name]
                          for name in SOURCES})
    cover = Coverage.of(query, floor)
    hits: list[dict[str, Any]] = []
    below = 0
    for f in fused:
        name, h = flat[f.id]
        share = cover.share(h["text"])
        if share == 0.0 or share < cover.floor:
            below += 1
            continue
        hits.append({**h, "kind": name, "score": round(f.rrf * (0.5 + 0.5 * share), 6),
                     "coverage": round(share, 3)})
    hits.sort(key=lambda h: (-h["score"], -h["coverage"]))
    return {"query": query, "hits": hits[:limit], "user_id": user, "tenant_id": tenant,
            "below_floor": below, "ranking": RANKING + (
                f" (k = {fusion.k}); hits carrying less than {floor:.0%} of the question's "
                "words are left out (below_floor counts them)")}


def _memory_hit(r: dict[str, Any], user: str) -> dict[str, Any]:
    what = {"preference": f"preference '{r.get('key')}'", "rule": f"rule when '{r.get('key')}'",
            "playbook": f"playbook '{r.get('key')}'"}.get(r["kind"], r["kind"])
    return {"id": f"memory:{r['id']}", "text": r["content"],
            "source": f"user memory ({r['type']} {what}) of {user}", "native_score": r["score"]}
