"""The local embedder: WordLlama's static token embeddings, shipped inside its PyPI wheel.

``wordllama`` 0.4 ships ``weights/l2_supercat_256.safetensors`` (16 MB, 256 dimensions) and
its tokenizer file in ``tokenizers/``; its loader looks for the tokenizer under
``tokenizer/`` and would then try a model hub. So the shipped tokenizer file is copied once
into ``<data dir>/cache/wordllama/tokenizers/`` and the model is loaded from there with
downloads disabled: nothing is fetched at run time, and a missing file is an error that says
so. A text's vector is the average of its token vectors, normalized (unit length), so the dot
product of two vectors is their cosine similarity. It runs on the CPU in microseconds per
text; docs/performance.md (## Retrieval) has its RSS and texts/s.

Loaded models are shared by every daemon in one process (tests start many), keyed by model,
dimension and cache dir.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np

SHIPPED_DIM = 256
DIMS = (64, 128, 256)

_models: dict[tuple[str, int, str], Any] = {}
_lock = threading.Lock()


class LocalEmbedderError(RuntimeError):
    """The local model could not be loaded (package or shipped file missing)."""


def model_id(model: str, dim: int) -> str:
    """The name recorded with every stored vector, e.g. ``wordllama/l2_supercat@256``."""
    return f"wordllama/{model}@{dim}"


def _prepare_cache(cache_dir: Path, model: str) -> None:
    """Copy the tokenizer file the wheel ships to where the loader looks without a hub."""
    import wordllama

    pkg = Path(wordllama.__file__).parent
    name = f"{model}_tokenizer_config.json"
    shipped = pkg / "tokenizers" / name
    target = cache_dir / "tokenizers" / name
    if target.exists() and target.stat().st_size == shipped.stat().st_size:
        return
    if not shipped.exists():
        raise LocalEmbedderError(f"wordllama does not ship {shipped}; reinstall wordllama "
                                 "0.4.x or set [embeddings] provider = \"none\"")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copyfile(shipped, tmp)
    tmp.replace(target)


def load_model(model: str, dim: int, cache_dir: Path) -> Any:
    """The loaded WordLlama model (shared per process), or LocalEmbedderError."""
    if dim not in DIMS:
        raise LocalEmbedderError(f"[embeddings] dim must be one of {DIMS}; got {dim}")
    key = (model, dim, str(cache_dir))
    with _lock:
        if key in _models:
            return _models[key]
        try:
            from wordllama import WordLlama
        except ImportError as exc:
            raise LocalEmbedderError("the local embedder needs the wordllama package "
                                     "(pip install wordllama)") from exc
        _prepare_cache(cache_dir, model)
        try:
            wl = WordLlama.load(config=model, cache_dir=cache_dir, dim=SHIPPED_DIM,
                                trunc_dim=None if dim == SHIPPED_DIM else dim,
                                disable_download=True)
        except (FileNotFoundError, ValueError, AttributeError) as exc:
            raise LocalEmbedderError(f"cannot load the local model {model!r} offline: "
                                     f"{exc}") from exc
        _models[key] = wl
        return wl


class LocalEmbedder:
    """``embed(texts) -> float32 array (n, dim)``, each row of unit length."""

    def __init__(self, model: str, dim: int, cache_dir: Path) -> None:
        self.model = model
        self.dim = dim
        self.cache_dir = cache_dir
        self.model_id = model_id(model, dim)
        self._wl: Any = None

    def load(self) -> None:
        if self._wl is None:
            self._wl = load_model(self.model, self.dim, self.cache_dir)

    @property
    def loaded(self) -> bool:
        return self._wl is not None

    def embed(self, texts: list[str]) -> np.ndarray:
        self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # an empty text has no tokens (a zero vector): give it a placeholder token
        vecs = self._wl.embed([t if t.strip() else "." for t in texts], norm=False)
        vecs = np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return vecs / norms
