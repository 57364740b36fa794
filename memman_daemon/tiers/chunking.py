"""Chunking documents by tokens (business context, the three-tier design).

Windows of ``chunk_tokens`` tokens that overlap by ``chunk_overlap`` tokens, counted with the
same tiktoken encoding as everything else. A window does not end mid-thought when it can help
it: if a paragraph break, line break or sentence end falls in the last 40 % of the window, the
chunk ends there (so the overlap starts at a natural boundary too).
"""

from __future__ import annotations

from dataclasses import dataclass

import tiktoken


@dataclass
class Chunk:
    seq: int  #: position in the document, from 0
    text: str
    tokens: int  #: tokens in ``text``
    start_token: int  #: offset of the first token in the document


def _boundary_rank(piece: bytes) -> int:
    if b"\n\n" in piece:
        return 3
    if b"\n" in piece:
        return 2
    if piece.rstrip().endswith((b".", b"!", b"?", b":")):
        return 1
    return 0


def chunk_text(text: str, enc: tiktoken.Encoding, size: int, overlap: int) -> list[Chunk]:
    if size <= 0:
        raise ValueError("docs.chunk_tokens must be positive")
    overlap = max(0, min(overlap, size // 2))
    toks = enc.encode_ordinary(text)
    n = len(toks)
    chunks: list[Chunk] = []
    start = 0
    while start < n:
        end = min(n, start + size)
        if end < n:
            best, best_rank = end, 0
            floor = start + int(size * 0.6)
            for i in range(end - 1, floor, -1):
                rank = _boundary_rank(enc.decode_single_token_bytes(toks[i]))
                if rank > best_rank:
                    best, best_rank = i + 1, rank
                    if rank == 3:
                        break
            end = best
        piece = enc.decode(toks[start:end]).strip()
        if piece:
            chunks.append(Chunk(len(chunks), piece, end - start, start))
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    return chunks
