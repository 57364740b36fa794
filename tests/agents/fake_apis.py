"""Fake LLM endpoints on loopback for the real coding agents (stdlib only, no network).

    with FakeAPI("messages") as api:   # Anthropic Messages API (Claude Code)
    with FakeAPI("responses") as api:  # OpenAI Responses API (Codex)
        api.url        # http://127.0.0.1:PORT  (Codex: api.url + "/v1")
        api.reply      # what the model answers (default "OK.")
        api.bodies     # every JSON request body received, in order

Both stream (Server-Sent Events) when asked to: the Messages API as ``message_start``,
``content_block_start``, ``content_block_delta``, ``content_block_stop``, ``message_delta``,
``message_stop``; the Responses API as ``response.created``, ``response.output_item.added``,
``response.output_text.delta``, ``response.output_item.done``, ``response.completed``.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class FakeAPI:
    def __init__(self, kind: str) -> None:
        assert kind in ("messages", "responses")
        self.kind = kind
        self.reply = "OK."
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self._send(200, {"data": [], "object": "list"})

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"raw": raw.decode(errors="replace")}
                with api._lock:
                    api.bodies.append(body)
                    api.paths.append(self.path)
                if "count_tokens" in self.path:
                    self._send(200, {"input_tokens": 10})
                elif api.kind == "messages":
                    self._messages(body)
                else:
                    self._responses(body)

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, chunks: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for c in chunks:
                    self.wfile.write(c)
                self.wfile.flush()
                self.close_connection = True

            def _messages(self, body: dict[str, Any]) -> None:
                mid = f"msg_{uuid.uuid4().hex[:20]}"
                model = body.get("model", "claude")
                usage = {"input_tokens": 10, "output_tokens": 5}
                text = api.reply
                if not body.get("stream"):
                    self._send(200, {"id": mid, "type": "message", "role": "assistant",
                                     "model": model, "content": [{"type": "text", "text": text}],
                                     "stop_reason": "end_turn", "stop_sequence": None,
                                     "usage": usage})
                    return
                self._stream([
                    _sse("message_start", {"type": "message_start", "message": {
                        "id": mid, "type": "message", "role": "assistant", "model": model,
                        "content": [], "stop_reason": None, "stop_sequence": None,
                        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
                    _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}}),
                    _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": text}}),
                    _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    _sse("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": "end_turn",
                                                     "stop_sequence": None},
                                           "usage": {"output_tokens": 5}}),
                    _sse("message_stop", {"type": "message_stop"}),
                ])

            def _responses(self, body: dict[str, Any]) -> None:
                rid = f"resp_{uuid.uuid4().hex[:20]}"
                iid = f"msg_{uuid.uuid4().hex[:20]}"
                text = api.reply
                item = {"type": "message", "id": iid, "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}
                resp = {"id": rid, "object": "response", "status": "completed",
                        "model": body.get("model", "gpt"), "output": [item],
                        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                  "input_tokens_details": {"cached_tokens": 0},
                                  "output_tokens_details": {"reasoning_tokens": 0}}}
                if not body.get("stream"):
                    self._send(200, resp)
                    return
                self._stream([
                    _sse("response.created", {"type": "response.created",
                                              "response": {**resp, "status": "in_progress",
                                                           "output": []}}),
                    _sse("response.output_item.added", {
                        "type": "response.output_item.added", "output_index": 0,
                        "item": {**item, "status": "in_progress", "content": []}}),
                    _sse("response.output_text.delta", {
                        "type": "response.output_text.delta", "item_id": iid,
                        "output_index": 0, "content_index": 0, "delta": text}),
                    _sse("response.output_item.done", {"type": "response.output_item.done",
                                                       "output_index": 0, "item": item}),
                    _sse("response.completed", {"type": "response.completed",
                                                "response": resp}),
                ])

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def texts(self, since: int = 0) -> list[str]:
        """Each body received (from ``since``) as one JSON string, to search for a fact."""
        with self._lock:
            return [json.dumps(b, ensure_ascii=False) for b in self.bodies[since:]]
