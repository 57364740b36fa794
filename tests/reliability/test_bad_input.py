"""Bad input under fuzzing: valid frames with one or two bytes flipped (hypothesis), and junk
streams. After each, the daemon still answers a ping; a junk stream is closed in bounded time."""

from __future__ import annotations

import asyncio
import os
import random
import socket

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memman.protocol import pack_notification, pack_request
from tests.helpers import daemon_process, running_daemon
from tests.wire import RawConn, blocking_ping

GUARD = 30.0

VALID_FRAMES = [
    pack_request(1, "memman_ping", []),
    pack_request(2, "memman_get_api_info", []),
    pack_request(3, "memman_session_open", ["fz", {"user_id": "u", "tenant_id": "t"}]),
    pack_request(4, "memman_session_add", ["fz", {"role": "user", "content": "hello fuzz",
                                                   "metadata": {"k": [1, 2.5, None]}}]),
    pack_request(5, "memman_session_add", ["fz", {"type": "tool_call", "role": "assistant",
                                                   "tool_calls": [{"id": "c1", "name": "f",
                                                                   "arguments": "{}"}]}]),
    pack_request(6, "memman_session_get", ["fz", {"limit": 3}]),
    pack_request(7, "memman_count_tokens", [[{"role": "user", "content": "count me"}], "gpt-4o"]),
    pack_request(8, "memman_subscribe", [["session", "stats"], {"session_id": "fz"}]),
    pack_request(9, "memman_session_list", [{}]),
    pack_request(10, "memman_stats", []),
    pack_notification("nvim_set_client_info", ["x", {}, "remote", {}, {}]),
    msgpack.packb([0, 11, b"memman_ping", []], use_bin_type=True),
]


@pytest.fixture(scope="module")
def daemon():
    os.environ["MEMMAN_LIMITS_FRAME_TIMEOUT_S"] = "0.5"
    try:
        with daemon_process() as d:
            yield d
    finally:
        os.environ.pop("MEMMAN_LIMITS_FRAME_TIMEOUT_S", None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=st.sampled_from(VALID_FRAMES),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                      min_size=1, max_size=2),
       then_valid=st.booleans())
def test_mutated_frames_leave_the_daemon_serving(daemon, frame: bytes, flips, then_valid) -> None:
    data = bytearray(frame)
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(0.25)
    try:
        s.connect(str(daemon.socket))
        s.sendall(bytes(data) + (VALID_FRAMES[0] if then_valid else b""))
        try:  # whatever comes back (an answer, an error, a close) is fine; just drain a little
            s.recv(65536)
        except (TimeoutError, OSError):
            pass
    finally:
        s.close()
    assert daemon.proc.poll() is None, daemon.log.read_text()[-3000:]
    assert blocking_ping(daemon.socket, timeout=GUARD) == "pong"


async def _closed_within_guard(data_source, **limits) -> None:
    async with running_daemon(limits={"frame_timeout_s": 0.5, **limits}) as d, \
            d.client("bystander") as bystander, RawConn.open(d.socket) as rc:
        reader = asyncio.create_task(rc.outcome(GUARD))
        sent = 0
        for chunk in data_source():  # keep sending until the daemon hangs up
            if reader.done() or not await rc.send(chunk):
                break
            sent += len(chunk)
            await asyncio.sleep(0)
        out = await reader
        assert out.closed, f"still open after {sent} junk bytes and {GUARD}s"
        assert await bystander.ping() == "pong"


async def test_random_junk_stream_is_closed() -> None:
    def source():
        rng = random.Random(6)
        for _ in range(4096):  # at most 256 MiB; it closes long before
            yield rng.randbytes(65536)
    await _closed_within_guard(source)


async def test_junk_without_invalid_bytes_is_closed() -> None:
    """Bytes that form valid msgpack but declare ever-longer strings: cut by the size limit."""
    def source():
        for _ in range(4096):
            yield b"\xdb\x7f\xff\xff\xff" + b"a" * 65531
    await _closed_within_guard(source, max_message_bytes=1 << 20)


async def test_endless_invalid_messages_from_a_client_that_never_reads_are_dropped() -> None:
    """Valid msgpack that is no message (a stream of integers): each gets an error event; a
    client that sends them without reading the answers is dropped at the buffer cap."""
    def source():
        for _ in range(100_000):
            yield b"\x01" * 4096
    await _closed_within_guard(source, subscriber_buffer_bytes=1 << 16, max_message_bytes=1 << 16)
