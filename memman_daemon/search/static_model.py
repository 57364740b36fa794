"""WordLlama's static model run from the files its wheel ships, without the package's code.

The ``wordllama`` wheel (0.4) ships ``weights/l2_supercat_256.safetensors`` (Llama 2's token
embedding table distilled to 256 dimensions, float16, 32,000 x 256) and
``tokenizers/l2_supercat_tokenizer_config.json`` (Llama 2's BPE tokenizer). Importing the
package runs its code: ``requests``, ``pydantic``, its config and clustering modules, ~0.25 s
of CPU under the interpreter lock while a restarting daemon reads its session log. So
this module finds the package's folder without importing it (``wheels.package_dir``:
``find_spec`` of a top-level package does not run it), reads the safetensors file itself (an 8-byte length, a
JSON header, the raw little-endian array) and the tokenizer with the ``tokenizers`` library,
and computes what ``WordLlama.load(config, dim=256, trunc_dim=d).embed(texts, norm=False)``
does (``wordllama/inference.py``):

- the tokenizer as shipped (no truncation, no special tokens: ``add_special_tokens=False``);
- each token id clipped to the table, its row of the float32 table (the float16 file cast,
  exact), the first ``dim`` columns when truncated;
- the rows of a text summed in float32 in token order (numpy adds the token axis of a padded
  batch one position at a time), divided by the number of tokens (at least 1): a text with no
  token is a zero vector. Padding adds zero rows, which leaves each sum as it was.

The vectors are bit-identical to the package's (tests/search/test_static_model.py compares
them on thousands of texts at 256, 128 and 64 dimensions). What differs is only the work: texts
are grouped by token count (little padding; the package pads each batch of 64 to its longest
text), a group gathers at most ``GROUP_CELLS`` token rows, and a longer text is summed in parts
carried over in the same order.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np

from memman_daemon.wheels import package_dir

PACKAGE = "wordllama"  #: the wheel that ships the files (a dependency of memman)
SHIPPED_DIM = 256  #: the shipped weights' dimension; 128 and 64 are its first columns
TENSOR = "embedding.weight"  #: the table's name in the safetensors file
GROUP_CELLS = 1 << 12  #: token rows gathered at once: 4 MiB of float32 at 256 dimensions
_DTYPES = {"F16": "<f2", "F32": "<f4"}


class StaticModelUnavailable(RuntimeError):
    """The package with the shipped files is missing, or a file is missing or unreadable."""


def shipped_files(model: str) -> tuple[Path, Path]:
    """The weights and tokenizer files the wheel ships for ``model``, or the error naming
    what is missing."""
    pkg = package_dir(PACKAGE)
    if pkg is None:
        raise StaticModelUnavailable(
            f"the local model {model!r} needs the wordllama package, whose wheel ships its "
            "files (pip install 'wordllama>=0.4,<0.5'), or set [embeddings] provider = \"none\"")
    weights = pkg / "weights" / f"{model}_{SHIPPED_DIM}.safetensors"
    tokenizer = pkg / "tokenizers" / f"{model}_tokenizer_config.json"
    for path in (weights, tokenizer):
        if not path.is_file():
            raise StaticModelUnavailable(
                f"wordllama does not ship {path}; reinstall wordllama 0.4.x or set "
                "[embeddings] provider = \"none\"")
    return weights, tokenizer


def read_table(path: Path, name: str = TENSOR) -> np.ndarray:
    """One tensor of a safetensors file (read-only, its own dtype): the file is an 8-byte
    little-endian header length, the JSON header (``dtype``, ``shape``, ``data_offsets``
    from the end of the header) and the raw bytes."""
    try:
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if not 2 <= size <= 1 << 20:
                raise ValueError(f"a header of {size} bytes")
            info = json.loads(f.read(size))[name]
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(n) for n in info["shape"])
            start, end = (int(n) for n in info["data_offsets"])
            f.seek(8 + size + start)
            data = f.read(end - start)
        arr = np.frombuffer(data, dtype=dtype)
        if len(shape) != 2 or arr.size != shape[0] * shape[1]:
            raise ValueError(f"{arr.size} values for the shape {shape}")
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise StaticModelUnavailable(f"cannot read {name} from {path}: {exc!r}") from exc
    return arr.reshape(shape)


class StaticModel:
    """A text's vector: the float32 mean of its tokens' rows (not normalized), as the
    package's ``embed(texts, norm=False)``. Shared by threads: nothing changes after load."""

    def __init__(self, weights: Path, tokenizer: Path, dim: int) -> None:
        table = read_table(weights)
        if not 0 < dim <= table.shape[1]:
            raise StaticModelUnavailable(f"{weights} has {table.shape[1]} dimensions, not {dim}")
        self.dim = dim
        self.vocab = table.shape[0]
        # the float32 table (cast from float16: exact), one zero row after it for padding
        self.table = np.empty((self.vocab + 1, dim), dtype=np.float32)
        self.table[:-1] = table[:, :dim]
        self.table[-1] = 0.0
        self.tokenizer = _tokenizer(tokenizer)
        enc = getattr(self.tokenizer, "encode_batch_fast", None)  # no offsets: tokenizers >= 0.21
        self._encode: Any = enc if enc is not None else self.tokenizer.encode_batch

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, as the package tokenizes it (no special tokens)."""
        return [e.ids for e in self._encode(texts, add_special_tokens=False)]

    def embed(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32: each text's mean token row; zeros for no token."""
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if not n:
            return out
        ids = self.token_ids(texts)
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=n)
        order = np.argsort(lens, kind="stable")
        ordered = lens[order]
        i = int(np.searchsorted(ordered, 1))  # the texts with no token stay zero
        while i < n:
            j = i + 1  # texts i..j-1 (ascending counts): at most GROUP_CELLS cells padded
            while j < n and (j + 1 - i) * int(ordered[j]) <= GROUP_CELLS:
                j += 1
            rows = order[i:j]
            sums = self._sums([ids[k] for k in rows], ordered[i:j])
            out[rows] = sums / ordered[i:j, None].astype(np.float32)
            i = j
        return out

    def _sums(self, ids: list[list[int]], lens: np.ndarray) -> np.ndarray:
        """The float32 sums of the texts' token rows, each in token order."""
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64,
                           count=int(lens.sum()))
        np.clip(flat, 0, self.vocab - 1, out=flat)
        if len(ids) == 1 and lens[0] > GROUP_CELLS:
            return self._long_sum(flat)[None, :]
        longest = int(lens[-1])
        padded = np.full((len(ids), longest), self.vocab, dtype=np.int64)  # the zero row
        padded[np.arange(longest)[None, :] < lens[:, None]] = flat
        # numpy adds along the token axis one position at a time: the package's order
        summed: np.ndarray = self.table[padded].sum(axis=1, dtype=np.float32)
        return summed

    def _long_sum(self, flat: np.ndarray) -> np.ndarray:
        """One text of more than GROUP_CELLS tokens: its sum carried from part to part as
        the first row of the next (the same additions in the same order as in one piece)."""
        buf = np.empty((GROUP_CELLS + 1, self.dim), dtype=np.float32)
        acc: np.ndarray = self.table[flat[:GROUP_CELLS]].sum(axis=0, dtype=np.float32)
        for p in range(GROUP_CELLS, len(flat), GROUP_CELLS):
            part = flat[p:p + GROUP_CELLS]
            buf[0] = acc
            np.take(self.table, part, axis=0, out=buf[1:len(part) + 1])
            acc = buf[:len(part) + 1].sum(axis=0, dtype=np.float32)
        return acc


def _tokenizer(path: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise StaticModelUnavailable("the local model needs the tokenizers package "
                                     "(a dependency of wordllama)") from exc
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for an unreadable file
        raise StaticModelUnavailable(f"cannot read the tokenizer {path}: {exc}") from exc
    tok.no_truncation()
    tok.no_padding()
    return tok


def load(model: str, dim: int) -> StaticModel:
    """``model`` (``l2_supercat``) at ``dim`` from the installed wheel's files."""
    weights, tokenizer = shipped_files(model)
    return StaticModel(weights, tokenizer, dim)
