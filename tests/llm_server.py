"""A tiny OpenAI-compatible HTTP server on loopback, for tests (stdlib only, no network).

    with LLMServer() as srv:                 # starts on 127.0.0.1:<free port>
        srv.base_url                         # "http://127.0.0.1:PORT/v1" -> openai base_url
        srv.mode = "good"                    # "good" | "500" | "hang" | "malformed" | "empty"
        srv.reply = "text"                   # what "good" answers (default: a summary line)
        srv.respond = fn                     # optional: fn(body) -> the assistant message
                                             # ("good" mode), e.g. one with tool_calls
        srv.requests                         # every JSON body received, in order
        srv.paths                            # the request paths, in order

Endpoints:

* ``POST /v1/chat/completions`` -- per ``mode``: ``good`` answers ``reply`` as a normal chat
  completion with ``usage`` (prompt_tokens = words in the prompt, completion_tokens = words in
  the reply); ``500`` answers HTTP 500 with an OpenAI-style error body; ``hang`` waits
  ``hang_s`` seconds (default 10) before answering -- past any test timeout; ``malformed``
  answers HTTP 200 with a body that is not JSON; ``empty`` answers valid JSON with no choices.
* ``POST /v1/embeddings`` -- always works: for each input string a deterministic unit vector
  of ``dim`` floats (default 8) derived from sha256 of the text, so equal texts give equal
  vectors. ``model`` is echoed; ``usage.prompt_tokens`` = words in the inputs.

Any key is accepted. ``close()`` (or leaving the ``with``) stops the server and releases hung
requests.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def embed(text: str, dim: int = 8) -> list[float]:
    """The deterministic vector the server returns for ``text``."""
    raw = hashlib.sha256(text.encode()).digest()
    while len(raw) < dim * 2:
        raw += hashlib.sha256(raw).digest()
    vals = [(int.from_bytes(raw[2 * i: 2 * i + 2], "big") / 65535.0) * 2 - 1 for i in range(dim)]
    norm = math.sqrt(sum(v * v for v in vals)) or 1.0
    return [v / norm for v in vals]


class LLMServer:
    def __init__(self, mode: str = "good", reply: str = "Summary: the user asked about the task; "
                 "decisions recorded; tools used; no open errors.", dim: int = 8,
                 hang_s: float = 10.0) -> None:
        self.mode = mode
        self.reply = reply
        self.dim = dim
        self.hang_s = hang_s
        #: when set, "good" answers with the message this returns for the request body (a
        #: message with ``tool_calls`` finishes with "tool_calls"), instead of ``reply``
        self.respond: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except ValueError:
                    body = {}
                server.requests.append(body)
                server.paths.append(self.path)
                if self.path.rstrip("/").endswith("/embeddings"):
                    return self._embeddings(body)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, b'{"error": {"message": "not found"}}')
                mode = server.mode
                if mode == "500":
                    return self._send(500, json.dumps({"error": {
                        "message": "internal error (test)", "type": "server_error"}}).encode())
                if mode == "hang":
                    server._stop.wait(server.hang_s)
                    mode = "good"
                if mode == "malformed":
                    return self._send(200, b'{"id": "x", "choices": [ this is not json')
                if mode == "empty":
                    return self._send(200, json.dumps({
                        "id": "chatcmpl-test", "object": "chat.completion",
                        "created": int(time.time()), "model": body.get("model", "test"),
                        "choices": []}).encode())
                prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
                message = ({"role": "assistant", "content": server.reply}
                           if server.respond is None else server.respond(body))
                reply = str(message.get("content") or "")
                self._send(200, json.dumps({
                    "id": "chatcmpl-test", "object": "chat.completion",
                    "created": int(time.time()), "model": body.get("model", "test"),
                    "choices": [{"index": 0, "message": message, "finish_reason":
                                 "tool_calls" if message.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": len(prompt.split()),
                              "completion_tokens": len(reply.split()),
                              "total_tokens": len(prompt.split()) + len(reply.split())},
                }).encode())

            def _embeddings(self, body: dict[str, Any]) -> None:
                inputs = body.get("input", [])
                if isinstance(inputs, str):
                    inputs = [inputs]
                data = [{"object": "embedding", "index": i, "embedding": embed(str(t), server.dim)}
                        for i, t in enumerate(inputs)]
                words = sum(len(str(t).split()) for t in inputs)
                self._send(200, json.dumps({
                    "object": "list", "data": data, "model": body.get("model", "test"),
                    "usage": {"prompt_tokens": words, "total_tokens": words}}).encode())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r, p in zip(self.requests, self.paths, strict=False) if "chat" in p]

    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LLMServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
