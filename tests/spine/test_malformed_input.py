"""Malformed input: each case gets an error or a close, and everyone else keeps being served.

Each row sends bytes on a raw connection. ``close``: the daemon answers with a
``memman_error_event`` (where it can) and closes that connection. ``error``: an error response or
event, and the same connection still answers a ping afterwards. Either way a bystander client
connected before, and a fresh connection after, still get answers.
"""

from __future__ import annotations

import random

import msgpack
import pytest

from memman import errors
from memman.protocol import pack_request
from tests.helpers import running_daemon
from tests.wire import RawConn

LIMITS = {"frame_timeout_s": 0.5, "max_message_bytes": 1 << 20}
GUARD = 30.0  # seconds: a failure guard, never an expectation of speed


def packb(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def junk(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


PING = pack_request(99, "memman_ping", [])

CASES = [
    # name, bytes, expected ("close" or "error"), expected code (None = any)
    ("invalid byte 0xc1", b"\xc1", "close", errors.PARSE_ERROR),
    ("invalid byte inside a request", PING[:5] + b"\xc1" + PING[6:], "close", errors.PARSE_ERROR),
    ("truncated frame", PING[:-3], "close", errors.PARSE_ERROR),
    ("declared 4 GiB bin",
     b"\x94\x00\x01\xabmemman_ping\x91\xc6\xff\xff\xff\xff" + b"\0" * 64, "close", errors.PARSE_ERROR),
    ("declared 4 GiB array", b"\xdd\xff\xff\xff\xff" + b"\xc0" * 64, "close", None),
    # frames that stop at an element boundary: only the half-frame timeout can close them
    ("frame cut after a container header", b"\x94\x00\x01", "close", errors.PARSE_ERROR),
    ("declared 4 GiB bin, no body", b"\x94\x00\x01\xabmemman_ping\x91\xc6\xff\xff\xff\xff",
     "close", errors.PARSE_ERROR),
    # readable frames refused whole: the request is answered, the rest of the frame skipped
    # unbuilt, and the connection stays usable
    ("message larger than the limit",
     pack_request(3, "memman_ping", [b"x" * (2 << 20)]), "error", errors.INVALID_PARAMS),
    ("message of many small items larger than the limit",
     pack_request(13, "memman_ping", [[1] * (3 << 20)]), "error", errors.INVALID_PARAMS),
    ("message larger than the limit, no msgid to answer",
     packb([0, "x", "memman_ping", [b"x" * (2 << 20)]]), "error", errors.INVALID_PARAMS),
    ("wrong array length", packb([0, 1, "memman_ping"]), "error", errors.INVALID_REQUEST),
    ("request with five elements", packb([0, 1, "memman_ping", [], 5]), "error",
     errors.INVALID_REQUEST),
    ("message type 5", packb([5, 1, "memman_ping", []]), "error", errors.INVALID_REQUEST),
    ("not an array", packb({"method": "memman_ping"}), "error", errors.INVALID_REQUEST),
    ("empty array", packb([]), "error", errors.INVALID_REQUEST),
    ("msgid not an integer", packb([0, "one", "memman_ping", []]), "error",
     errors.INVALID_REQUEST),
    ("msgid out of range", packb([0, 2**40, "memman_ping", []]), "error", errors.INVALID_REQUEST),
    ("method name not a string", packb([0, 4, 12, []]), "error", errors.INVALID_REQUEST),
    ("non-array params", packb([0, 5, "memman_ping", {"a": 1}]), "error", errors.INVALID_PARAMS),
    ("nil params", packb([0, 6, "memman_session_list", None]), "error", errors.INVALID_PARAMS),
    ("wrong param type", packb([0, 7, "memman_session_get", [[1, 2]]]), "error",
     errors.INVALID_PARAMS),
    ("invalid UTF-8 method name (bin)", packb([0, 8, b"\xff\xfe", []]), "error",
     errors.INVALID_REQUEST),
    ("deep nesting (100,000 levels)", b"\x91" * 100_000 + b"\xc0", "close", errors.PARSE_ERROR),
    ("deep nesting inside params (500 levels)",
     b"\x94\x00\x09\xabmemman_ping" + b"\x91" * 500 + b"\xc0", "error", errors.INVALID_PARAMS),
    # the cap is on the bytes of one frame whatever its shape: many small items are consumed
    # as they arrive, so a declared-length check alone never sees them
    ("frame of 200k empty maps (200 KB: under the byte cap, over one container per 8 bytes)",
     b"\x94\x00\x0b\xabmemman_ping\x91\xdd\x00\x03\x0d\x40" + b"\x80" * 200_000, "error",
     errors.INVALID_PARAMS),
    ("junk stream (1 MiB random bytes)", junk(1 << 20), "close", None),
    ("junk after a valid request", PING + junk(4096, seed=2), "close", None),
]


@pytest.mark.parametrize("name,data,expected,code", CASES, ids=[c[0] for c in CASES])
async def test_malformed_input(name: str, data: bytes, expected: str, code: int | None) -> None:
    async with running_daemon(limits=LIMITS) as d, d.client("bystander") as bystander:
        async with RawConn.open(d.socket) as rc:
            await rc.send(data)
            if expected == "close":
                out = await rc.outcome(GUARD)
                assert out.closed, f"{name}: connection still open after {GUARD}s: {out.messages}"
            else:
                out = await rc.outcome(GUARD, until_any=True)
                assert not out.closed, f"{name}: closed, expected an error: {out.messages}"
                assert (await rc.call(100, "memman_ping"))[3] == "pong"
            if code is not None:
                assert code in out.error_codes(), f"{name}: {out.messages}"
            for err in out.errors:
                message = err[1] if isinstance(err, list) else err["message"]
                assert isinstance(message, str) and message, out.messages
        assert await bystander.ping() == "pong"
        async with d.client("after") as fresh:
            assert await fresh.ping() == "pong"
        assert d.server.state.connections  # the bystander is still served


@pytest.mark.parametrize("item", [b"\xcd\x01\x2c", b"\xa1x", b"\x90"],
                         ids=["uint16", "one-letter string", "empty array"])
async def test_frame_cap_holds_whatever_the_shape(item: bytes) -> None:
    """A frame over limits.max_message_bytes made of arrays of many small items is refused
    once the cap is reached (msgpack consumes such a frame as it arrives, so a check of declared
    lengths or of unparsed bytes never sees it): never built whole, its request answered with
    -32602 naming the limit, the rest skipped, the connection usable; the half-frame timeout
    is out of the way here, and a bystander is served throughout."""
    limits = {"frame_timeout_s": 120.0, "max_message_bytes": 1 << 20}
    inner = b"\xdc\x40\x00" + item * 0x4000  # arrays of 16k items
    n = 4 * (1 << 20) // len(inner) + 1  # 4 MB in all
    frame = b"\x94\x00\x0a\xabmemman_ping\x91\xdc" + n.to_bytes(2, "big") + inner * n
    async with running_daemon(limits=limits) as d, d.client("bystander") as bystander:
        async with RawConn.open(d.socket) as rc:
            assert await rc.send(frame)
            out = await rc.outcome(GUARD, until_msgid=10)
            assert not out.closed, out.messages
            answer = [m for m in out.messages if m[0] == 1]
            assert answer and answer[0][2] is not None, "the frame was parsed whole"
            assert answer[0][2][0] == errors.INVALID_PARAMS
            assert "limits.max_message_bytes" in answer[0][2][1]
            assert (await rc.call(100, "memman_ping"))[3] == "pong"
        assert await bystander.ping() == "pong"


async def test_unknown_notifications_are_ignored() -> None:
    async with running_daemon() as d, RawConn.open(d.socket) as rc:
        await rc.send(packb([2, "nvim_set_client_info", ["x", {}, "remote", {}, {}]]))
        await rc.send(packb([2, "memman_no_such_event", []]))
        await rc.send(packb([1, 12345, None, "a response nobody asked for"]))
        resp = await rc.call(1, "memman_ping")
        assert resp == [1, 1, None, "pong"]


async def test_pipelined_requests_answered_by_msgid() -> None:
    async with running_daemon() as d, RawConn.open(d.socket) as rc:
        burst = b"".join(pack_request(i, "memman_ping", []) for i in range(1, 201))
        await rc.send(burst)
        out = await rc.outcome(GUARD, until_msgid=200)
        ids = sorted(m[1] for m in out.messages if m[0] == 1)
        assert ids == list(range(1, 201))
