"""Chunking documents by tokens (business context, the three-tier design).

Windows of ``chunk_tokens`` tokens that overlap by ``chunk_overlap`` tokens, counted with the
same tiktoken encoding as everything else. A window does not end mid-thought when it can help
it: if a paragraph break, line break or sentence end falls in the last 40 % of the window, the
chunk ends there (so the overlap starts at a natural boundary too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
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


def _ranks(toks: np.ndarray, enc: tiktoken.Encoding) -> np.ndarray:
    """Each token's boundary rank, looked up once per distinct token."""
    present = np.flatnonzero(np.bincount(toks))  # linear, where a sort held the GIL longer
    table = np.zeros(int(present[-1]) + 1, dtype=np.int8)
    table[present] = np.fromiter(
        (_boundary_rank(enc.decode_single_token_bytes(int(t))) for t in present),
        dtype=np.int8, count=len(present))
    return table[toks]


def chunk_text(text: str, enc: tiktoken.Encoding, size: int, overlap: int) -> list[Chunk]:
    return chunk_text_counted(text, enc, size, overlap)[0]


def chunk_text_counted(text: str, enc: tiktoken.Encoding, size: int,
                       overlap: int) -> tuple[list[Chunk], int]:
    """The chunks of ``text`` and its number of tokens.

    The tokens come as one numpy array (``encode_to_numpy``, the same tokens as
    ``encode_ordinary``): a list of ten million ints for a 50 MB document is built holding the
    GIL, which stopped the daemon's event loop while a worker thread chunked. Each window's end
    is the last of its best-ranked boundaries, found with numpy, not token by token."""
    if size <= 0:
        raise ValueError("docs.chunk_tokens must be positive")
    overlap = max(0, min(overlap, size // 2))
    toks = enc.encode_to_numpy(text, disallowed_special=())
    n = len(toks)
    ranks = _ranks(toks, enc) if n > size else np.zeros(0, dtype=np.int8)
    chunks: list[Chunk] = []
    start = 0
    while start < n:
        end = min(n, start + size)
        if end < n:
            # the window's candidates are tokens floor+1 .. end-1; the last one of the
            # highest rank wins (none when every rank is 0: the window ends at the size)
            floor = start + int(size * 0.6)
            window = ranks[floor + 1:end]
            if len(window):
                top = int(window.max())
                if top > 0:
                    end = floor + 1 + (len(window) - 1 - int(np.argmax(window[::-1] == top))) + 1
        piece = enc.decode(toks[start:end].tolist()).strip()
        if piece:
            chunks.append(Chunk(len(chunks), piece, end - start, start))
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    return chunks, n
