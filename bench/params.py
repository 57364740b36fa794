"""Parameter checking: what the declared schemas cost per request.

For each case, the time to check a request's parameters (``Method.bind``, which runs every
spec) beside the time to decode the same request from msgpack (the baseline: work every
request pays anyway), measured in the same run.

    .venv/bin/python bench/params.py
"""

from __future__ import annotations

import time
from typing import Any

import msgpack

from memman import names
from memman.protocol import pack_request
from memman_daemon import handlers
from memman_daemon.engine import portability
from memman_daemon.model import Entry, Session, SessionMeta
from memman_daemon.rpc import REGISTRY


def _export(n: int) -> dict[str, Any]:
    s = Session("s", SessionMeta())
    for i in range(1, n + 1):
        s.append(Entry(id=i, session_id="s", type="message", role="user",
                       content=f"entry {i} " + "word " * 40, tokens=50, created_at=1.7e9 + i,
                       metadata={"source": "bench", "n": i}))
    return portability.export(s)


def _time(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - t) / rounds)
    return best


def main() -> None:
    handlers.load_all()
    cases = [
        ("session_add, a short message", names.SESSION_ADD,
         ["s1", {"type": "message", "role": "user", "content": "what is the deploy window?",
                 "metadata": {"turn": 3}}], 20000),
        ("session_add, a tool call with arguments", names.SESSION_ADD,
         ["s1", {"type": "tool_call", "role": "assistant", "content": "",
                 "tool_calls": [{"id": "c1", "function": {"name": "search", "arguments":
                                                           {"q": "deploy", "limit": 5}}}]}],
         20000),
        ("session_context, opts", names.SESSION_CONTEXT, ["s1", {"max_tokens": 4000}], 50000),
        ("session_import, 1,000 entries", names.SESSION_IMPORT, [_export(1000), {}], 5),
    ]
    print(f"{'case':42} {'check (us)':>12} {'decode (us)':>12} {'check/decode':>13}")
    for label, name, params, rounds in cases:
        method = REGISTRY.methods[name]
        frame = pack_request(1, name, params)
        decoded = msgpack.unpackb(frame, raw=False, strict_map_key=False)[3]
        check = _time(lambda m=method, p=decoded: m.bind(p), rounds)
        decode = _time(lambda f=frame: msgpack.unpackb(f, raw=False, strict_map_key=False),
                       rounds)
        print(f"{label:42} {check * 1e6:12.1f} {decode * 1e6:12.1f} {check / decode:13.1f}")


if __name__ == "__main__":
    main()
