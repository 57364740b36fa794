"""The static model without the ``wordllama`` package's code (``search/static_model.py``): the
same vectors, bit for bit, as the package's own ``WordLlama.load(...).embed(texts, norm=False)``
on thousands of varied texts at 256, 128 and 64 dimensions, in batches of mixed lengths and
with the groups and the long-text parts made small; the daemon's embedder never imports the
package; a missing or broken shipped file is a LocalEmbedderError that names it."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memman_daemon.search import local_embedder as le
from memman_daemon.search import static_model as sm

MODEL = "l2_supercat"

_WORDS = (
    "the cluster deploy failed on staging region alpha rollback postgres 15 lunch friday "
    "naïve café Ünïcödé façade Straße øre ĳssel ﬁle 日本語 テキスト 中文字符测试 한국어 "
    "Ελληνικά русский עברית العربية हिन्दी ไทย 😀 🚀 👩‍👩‍👧 🇫🇷 ∑∫√ ≠ ≤ → ⟨x⟩ "
    "def f(x): return x**2 {\"key\": [1, 2.5e-3, null]} SELECT * FROM t WHERE id=42; "
    "0 7 42 3.14159 -17 1e9 0x1F 2026-11-28T12:00:00Z $19.99 100% #1 @user "
    "https://example.com/a?b=c&d=e /usr/lib/python3.11 C:\\Windows\\System32 "
    "<unk> <s> </s> [PAD] ▁ \u200b \u00a0 \ufeff \x00 \x7f"
).split(" ")


def _texts(n: int, seed: int = 7) -> list[str]:
    """Empty and whitespace-only texts, one word, unicode, emoji, CJK, code, numbers, control
    characters, and texts of thousands of tokens (no truncation: the package sets none)."""
    rng = random.Random(seed)
    texts = ["", " ", "   ", "\n", "\t\n \r", "\u3000", "a", "I", ".", "hello", "😀", "中",
             "x" * 5000, "ab " * 2500, "😀" * 700, " ".join(rng.choices(_WORDS, k=1500)),
             "\n".join(rng.choices(_WORDS, k=1200))]
    seps = [" ", "  ", "\n", "\t", "", " \n "]
    while len(texts) < n:
        k = rng.choice([1, 1, 2, 3, 5, 8, 13, 30, 80, 200])
        sep = rng.choice(seps)
        texts.append(sep.join(rng.choices(_WORDS, k=k)))
    rng.shuffle(texts)
    return texts


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """``dim -> the package's WordLlama`` (the package is imported here, in the test only)."""
    from wordllama import WordLlama

    cache = tmp_path_factory.mktemp("wordllama")
    pkg = sm.package_dir(sm.PACKAGE)
    assert pkg is not None
    (cache / "tokenizers").mkdir()
    shutil.copy(pkg / "tokenizers" / f"{MODEL}_tokenizer_config.json", cache / "tokenizers")
    return {dim: WordLlama.load(config=MODEL, cache_dir=cache, dim=256,
                                trunc_dim=None if dim == 256 else dim, disable_download=True)
            for dim in (256, 128, 64)}


def _package_vectors(wl: Any, texts: list[str]) -> np.ndarray:
    """The package's vectors, its batches of 64 formed of texts of similar lengths (each batch
    is padded to its longest text: shuffled, these texts would take gigabytes and a minute)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.empty((len(texts), wl.embedding.shape[1]), dtype=np.float32)
    out[order] = wl.embed([texts[i] for i in order], norm=False)
    return out


@pytest.mark.parametrize("dim", [256, 128, 64])
def test_the_vectors_are_the_packages_bit_for_bit(reference: dict[int, Any], dim: int) -> None:
    texts = _texts(3000)
    ref = _package_vectors(reference[dim], texts)
    # the package's own batches of mixed lengths give the same (a check of the reference)
    assert np.array_equal(reference[dim].embed(texts[:320], norm=False), ref[:320])
    model = sm.load(MODEL, dim)
    assert model.table.shape == (32001, dim)
    ours = model.embed(texts)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), dim)
    assert np.array_equal(ours, ref)
    # the same texts in batches of mixed sizes and lengths: a text's vector is its own
    rng = random.Random(dim)
    i = 0
    while i < 1000:
        k = rng.choice([1, 2, 7, 63, 64, 65, 300])
        assert np.array_equal(model.embed(texts[i:i + k]), ref[i:i + k]), (i, k)
        i += k
    # long texts and the whitespace-only ones are in there, with tokens or with none
    ids = model.token_ids(texts)
    assert max(map(len, ids)) > 4096 and min(map(len, ids)) == 0


def test_small_groups_and_long_texts_in_parts_add_in_the_same_order(
        reference: dict[int, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of a few hundred token rows, and every text over 300 tokens summed in parts."""
    texts = _texts(600, seed=11)
    model = sm.load(MODEL, 64)
    monkeypatch.setattr(sm, "GROUP_CELLS", 300)
    assert sum(len(t) > 3 * 300 for t in model.token_ids(texts)) >= 3
    assert np.array_equal(model.embed(texts), _package_vectors(reference[64], texts))


def test_the_local_embedder_normalizes_the_packages_vectors(reference: dict[int, Any]) -> None:
    texts = ["the deploy failed", "", "  ", "中文", "😀 🚀"]
    emb = le.LocalEmbedder(MODEL, 128, Path("/nonexistent/cache/wordllama"))
    got = emb.embed(texts)
    raw = reference[128].embed([t if t.strip() else "." for t in texts], norm=False)
    want = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert np.array_equal(got, want.astype(np.float32))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert emb.embed([]).shape == (0, 128)


def test_the_model_is_loaded_once_per_process_and_dimension(tmp_path: Path) -> None:
    a = le.load_model(MODEL, 64, tmp_path / "a" / "wordllama")
    b = le.load_model(MODEL, 64, tmp_path / "b" / "wordllama")
    assert a is b and a is not le.load_model(MODEL, 128, tmp_path / "a" / "wordllama")
    assert not (tmp_path / "a").exists()  # nothing copied into the data dir's cache


def test_the_daemons_embedder_never_imports_the_package(tmp_path: Path) -> None:
    code = (
        "import sys, importlib.util\n"
        "from pathlib import Path\n"
        "from memman_daemon.search.local_embedder import LocalEmbedder\n"
        "from memman_daemon.search import static_model\n"
        "assert static_model.package_dir(static_model.PACKAGE) is not None\n"
        f"e = LocalEmbedder('{MODEL}', 256, Path({str(tmp_path)!r}) / 'wordllama')\n"
        "v = e.embed(['hello world', ''])\n"
        "assert v.shape == (2, 256)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('wordllama', 'requests', 'pydantic', 'huggingface_hub', 'safetensors')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    assert list(tmp_path.iterdir()) == []


def _fresh(monkeypatch: pytest.MonkeyPatch, pkg: Path | None) -> None:
    monkeypatch.setattr(le, "_models", {})
    monkeypatch.setattr(sm, "package_dir", lambda package: pkg)


def test_a_missing_package_or_file_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = sm.package_dir(sm.PACKAGE)
    assert real is not None
    _fresh(monkeypatch, None)
    with pytest.raises(le.LocalEmbedderError, match="needs the wordllama package"):
        le.load_model(MODEL, 256, tmp_path)
    pkg = tmp_path / "wordllama"
    _fresh(monkeypatch, pkg)
    with pytest.raises(le.LocalEmbedderError, match=r"weights/l2_supercat_256\.safetensors"):
        le.load_model(MODEL, 256, tmp_path)
    (pkg / "weights").mkdir(parents=True)
    shutil.copy(real / "weights" / f"{MODEL}_256.safetensors", pkg / "weights")
    with pytest.raises(le.LocalEmbedderError, match=r"tokenizers/l2_supercat_tokenizer_config"):
        le.load_model(MODEL, 256, tmp_path)
    (pkg / "tokenizers").mkdir()
    (pkg / "tokenizers" / f"{MODEL}_tokenizer_config.json").write_text("{not json")
    with pytest.raises(le.LocalEmbedderError, match="cannot read the tokenizer"):
        le.load_model(MODEL, 256, tmp_path)
    with pytest.raises(le.LocalEmbedderError, match="dim must be one of"):
        le.load_model(MODEL, 32, tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "header", "dtype", "name"])
def test_a_broken_weights_file_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    real = sm.package_dir(sm.PACKAGE)
    assert real is not None
    pkg = tmp_path / "wordllama"
    shutil.copytree(real / "tokenizers", pkg / "tokenizers")
    (pkg / "weights").mkdir()
    data = (real / "weights" / f"{MODEL}_256.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "header":
        data = (10**9).to_bytes(8, "little") + data[8:]
    else:
        if damage == "dtype":
            header[sm.TENSOR]["dtype"] = "BF16"
        else:
            header["other"] = header.pop(sm.TENSOR)
        raw = json.dumps(header).encode()
        data = len(raw).to_bytes(8, "little") + raw + data[8 + size:]
    (pkg / "weights" / f"{MODEL}_256.safetensors").write_bytes(data)
    _fresh(monkeypatch, pkg)
    with pytest.raises(le.LocalEmbedderError, match=r"l2_supercat_256\.safetensors"):
        le.load_model(MODEL, 64, tmp_path)
