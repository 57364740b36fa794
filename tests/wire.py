"""Raw-socket helpers for tests that speak bytes to the daemon (malformed input, fuzzing).

    async with RawConn.open(sock) as rc:
        await rc.send(b"\\xc1")
        outcome = await rc.outcome(timeout=10)   # messages received, and whether it closed
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from memman.protocol import pack_request


@dataclass
class Outcome:
    messages: list[Any] = field(default_factory=list)
    closed: bool = False

    @property
    def errors(self) -> list[Any]:
        """Error responses' ``[code, message]`` and error events' payloads."""
        out = []
        for m in self.messages:
            if isinstance(m, list) and len(m) == 4 and m[0] == 1 and m[2] is not None:
                out.append(m[2])
            elif isinstance(m, list) and len(m) == 3 and m[0] == 2 and m[1] == "memman_error_event":
                out.append(m[2][0])
        return out

    def error_codes(self) -> list[int]:
        return [e[0] if isinstance(e, list) else e["code"] for e in self.errors]


class RawConn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, path: Path | str):
        reader, writer = await asyncio.open_unix_connection(str(path))
        rc = cls(reader, writer)
        try:
            yield rc
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def send(self, data: bytes) -> bool:
        """Write ``data``; False if the daemon already closed the connection."""
        try:
            self.writer.write(data)
            await self.writer.drain()
            return True
        except (ConnectionError, OSError):
            return False

    async def outcome(self, timeout: float, *, until_msgid: int | None = None,
                      until_any: bool = False) -> Outcome:
        """Read until the daemon closes, a response to ``until_msgid`` (or anything, with
        ``until_any``) arrives, or ``timeout`` seconds pass."""
        out = Outcome()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            try:
                data = await asyncio.wait_for(self.reader.read(65536), left)
            except TimeoutError:
                return out
            except (ConnectionError, OSError):
                out.closed = True
                return out
            if not data:
                out.closed = True
                return out
            self.unpacker.feed(data)
            for obj in self.unpacker:
                out.messages.append(obj)
            if until_any and out.messages:
                return out
            if until_msgid is not None and any(
                    isinstance(m, list) and len(m) == 4 and m[0] == 1 and m[1] == until_msgid
                    for m in out.messages):
                return out

    async def call(self, msgid: int, method: str, *params: Any, timeout: float = 10.0) -> Any:
        """Send one request and return its response ``[1, msgid, error, result]``."""
        assert await self.send(pack_request(msgid, method, params))
        out = await self.outcome(timeout, until_msgid=msgid)
        for m in out.messages:
            if isinstance(m, list) and len(m) == 4 and m[0] == 1 and m[1] == msgid:
                return m
        raise AssertionError(f"no response to {method} (closed={out.closed}): {out.messages}")


def blocking_ping(path: Path | str, timeout: float = 10.0) -> Any:
    """A fresh blocking connection: send memman_ping, return the result (raises on no answer).
    A ping is answered while the daemon still loads its data (``blocking_call`` of another
    method waits for the load)."""
    return blocking_call(path, "memman_ping", [], timeout)


def blocking_call(path: Path | str, method: str, params: list[Any],
                  timeout: float = 10.0) -> Any:
    """A fresh blocking connection: one request, its result (raises on no answer)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        s.sendall(pack_request(7, method, params))
        unpacker = msgpack.Unpacker(raw=False)
        while True:
            data = s.recv(65536)
            if not data:
                raise ConnectionError("closed before answering")
            unpacker.feed(data)
            for obj in unpacker:
                if obj[0] == 1 and obj[1] == 7:
                    return obj[3]
    finally:
        s.close()
