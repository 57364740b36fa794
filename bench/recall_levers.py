"""Ranking levers of late interaction, measured alone: how many token vectors an entry keeps,
how they are cut down and quantized, which question tokens count, and how MaxSim is combined
with BM25 and the sentence vector — each ranking filling the budget the same way
``bench/recall.py``'s baselines do (rank order, a turn that does not fit is skipped, the same
o200k count), on the same conversations of our own making, beside those baselines.

This is how ``search/late.py``'s choices were made (16 tokens, segment means, 4 bits, the
question's informative tokens, a second stage over the fusion's best 300). No daemon: the
window's own figures are bench/recall.py's.

    .venv/bin/python bench/recall_levers.py [--data recall|months] [--variant dated|undated]
                                            [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import recall as br  # noqa: E402
from bench.data import recall_data as rd  # noqa: E402
from memman.config import RecallConfig  # noqa: E402
from memman_daemon.search import late  # noqa: E402

Ranker = Callable[[dict[str, Any]], list[int]]


def compress(t: np.ndarray, n: int, how: str, quant: str) -> np.ndarray:
    """A turn's token vectors as stored: at most ``n`` (``how``: segment means or the first
    ``n``), quantized (``quant``: f32, int8 or int4 with a scale per token)."""
    if n and len(t) > n:
        if how == "first":
            t = t[:n]
        else:
            cuts = np.linspace(0, len(t), n + 1).round().astype(int)
            t = np.add.reduceat(t, cuts[:-1], axis=0) / np.diff(cuts)[:, None]
            t = t / np.linalg.norm(t, axis=1, keepdims=True)
    if quant == "int8":
        sc = np.abs(t).max(1, keepdims=True) / 127
        t = np.round(t / sc) * sc
    elif quant == "int4":  # what memman keeps (late.pack)
        packed, k = late.pack(t)
        t = late.unpack(packed[None], t.shape[1])[0][:k]
    return t.astype(np.float32)


class Conv:
    def __init__(self, c: rd.Conversation, dated: bool, tc: br.Counter_) -> None:
        self.c = c
        self.texts = [t.render(dated) for t in c.turns]
        self.msgs = [{"role": t.role, "content": s} for t, s in zip(c.turns, self.texts,
                                                                   strict=True)]
        self.costs = [tc.message(m) for m in self.msgs]
        self.bm25 = br.BM25([rd.words(s) for s in self.texts])
        m = br.minilm()
        self.pooled, self.toks = m.encode(self.texts, tokens=True)
        qs = [q.text for q in c.questions]
        self.qp, self.qt = m.encode(qs, tokens=True)
        self.qpieces = [m.pieces(q) for q in qs]
        self._docs: dict[tuple, list[np.ndarray]] = {}

    def docs(self, n: int, how: str, quant: str) -> list[np.ndarray]:
        key = (n, how, quant)
        if key not in self._docs:
            self._docs[key] = [compress(t, n, how, quant) for t in self.toks]
        return self._docs[key]


def maxsim(n: int = 0, how: str = "mean", quant: str = "f32", qall: bool = True) -> Ranker:
    def f(x: dict[str, Any]) -> list[int]:
        q = x["qt"] if qall else late.question_tokens(x["qt"], x["pieces"])
        d = x["conv"].docs(n, how, quant)
        return br.ranking(np.array([(q @ t.T).max(1).sum() for t in d]))
    return f


def fused(*fs: Ranker) -> Ranker:
    return lambda x: br.rrf(*[f(x) for f in fs])


def second(first: Ranker, then: Ranker, k: int) -> Ranker:
    """``first``'s best ``k`` in ``then``'s order, then the rest in ``first``'s."""
    def f(x: dict[str, Any]) -> list[int]:
        o = first(x)
        pos = {i: p for p, i in enumerate(then(x))}
        return sorted(o[:k], key=lambda i: pos[i]) + o[k:]
    return f


def bm25(x: dict[str, Any]) -> list[int]:
    return br.ranking(x["bm"])


def bm25_pos(x: dict[str, Any]) -> list[int]:
    return br.ranking(x["bm"], only_positive=True)


def dense(x: dict[str, Any]) -> list[int]:
    return br.ranking(x["dense"])


SYSTEMS: dict[str, Ranker] = {
    "BM25 + MiniLM (RRF)": fused(bm25_pos, dense),
    "MaxSim, every token, float32 (baseline)": maxsim(),
    "BM25 + MaxSim (RRF) (baseline)": fused(bm25_pos, maxsim()),
    "MaxSim, first 16 tokens, int8": maxsim(16, "first", "int8"),
    "MaxSim, 8 segment means, int8": maxsim(8, "mean", "int8"),
    "MaxSim, 16 segment means, int8": maxsim(16, "mean", "int8"),
    "MaxSim, 32 segment means, int8": maxsim(32, "mean", "int8"),
    "MaxSim, 16 segment means, int4 (kept)": maxsim(16, "mean", "int4"),
    "  + the question's informative tokens only": maxsim(16, "mean", "int4", qall=False),
    "  fused with BM25 (RRF)": fused(bm25_pos, maxsim(16, "mean", "int4", qall=False)),
    "  fused with BM25 and MiniLM (RRF)": fused(bm25_pos, dense,
                                                 maxsim(16, "mean", "int4", qall=False)),
    "  second stage over RRF's best 50": second(fused(bm25_pos, dense),
                                                maxsim(16, "mean", "int4", qall=False), 50),
    "  second stage over RRF's best 300 (memman)": second(
        fused(bm25_pos, dense), maxsim(16, "mean", "int4", qall=False), RecallConfig().rerank_candidates),
}


def run(data: str, dated: bool, quick: bool) -> dict[str, list[float]]:
    tc = br.Counter_()
    convs = br.conversations(data, quick)
    res: dict[str, dict[int, list[float]]] = {s: {b: [] for b in br.BUDGETS} for s in SYSTEMS}
    for c in convs:
        cv = Conv(c, dated, tc)
        for qi, q in enumerate(c.questions):
            x = {"bm": cv.bm25.scores(rd.words(q.text)), "dense": cv.pooled @ cv.qp[qi],
                 "qt": cv.qt[qi], "pieces": cv.qpieces[qi], "conv": cv}
            for name, f in SYSTEMS.items():
                order = f(x)
                for b in br.BUDGETS:
                    idx = br.fill(order, cv.costs, b)
                    text = "\n".join(cv.msgs[i]["content"] for i in idx)
                    kept = sum(c.turns[i].body() in text for i in q.evidence)
                    res[name][b].append(kept / len(q.evidence))
    return {s: [float(np.mean(res[s][b])) for b in br.BUDGETS] for s in SYSTEMS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", choices=br.DATASETS, default="recall")
    ap.add_argument("--variant", choices=br.VARIANTS, default="dated")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    got = run(a.data, a.variant == "dated", a.quick)
    print(f"{a.data}, {a.variant} turns: evidence recall of the ranking alone\n")
    print("| ranking | " + " | ".join(br._k(b) for b in br.BUDGETS) + " |")
    print("|---|" + "---:|" * len(br.BUDGETS))
    for s, v in got.items():
        print(f"| {s} | " + " | ".join(f"{x:.2f}" for x in v) + " |")
    print(f"\nrun: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
