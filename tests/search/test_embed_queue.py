"""The one embedding queue, from outside: a real daemon on a real socket embeds the recall
index's entries, a document's chunks and the relevance prefetch through one queue, a batch
from each source in turn, so a long recall backlog does not hold up a document's vectors."""

from __future__ import annotations

import asyncio

from tests.helpers import running_daemon

WORDS = ("harbour ledger crane invoice pallet customs manifest berth tide pilot tug anchor "
         "quay freight draft ballast").split()


def _line(k: int) -> str:
    return " ".join(WORDS[(k * 7 + i * 3) % len(WORDS)] for i in range(12)) + f" note {k}"


async def test_a_document_gets_its_vectors_while_a_recall_backlog_waits() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"user_id": "ana"})
        for k in range(1200):  # a recall backlog of many batches (``[recall] embed_batch``)
            await c.session_add("s", {"role": ("user", "assistant")[k % 2], "content": _line(k)})
        # a long document: its chunks are embedded in the background, not on the request
        text = "\n\n".join(f"Section {k}. " + " ".join(_line(k * 31 + j) for j in range(30))
                           for k in range(40))
        await c.docs_add("default", {"content": text, "doc_id": "manual"})
        st = await c.stats()
        assert set(st["embedding_queue"]["sources"]) == {"recall", "vector_sync", "prefetch"}

        async def document_done() -> dict:
            while True:
                st = await c.stats()
                vs = st["vector_sync"]
                if vs["state"] == "idle" and vs["done"] > 0 and vs["done"] == vs["total"]:
                    return st
                await asyncio.sleep(0.1)

        st = await asyncio.wait_for(document_done(), 120)
        # the document was not queued behind the whole recall backlog
        assert st["recall"]["pending_vectors"] > 0, st["recall"]
        assert st["embedding_queue"]["sources"]["vector_sync"]["batches"] >= 1
        assert await d.app.recall.drained(180)
        st = await c.stats()
        assert st["recall"]["pending_vectors"] == 0
        assert st["embedding_queue"]["sources"]["recall"]["batches"] >= 1200 // 128
        assert st["embedding_queue"]["failures"] == 0
        # and the document is found by meaning (its chunks have vectors of the search model)
        got = await c.docs_search("default", "ship paperwork for cargo at the dock", {})
        assert got["results"]
