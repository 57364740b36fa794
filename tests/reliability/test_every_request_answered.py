"""Every request a client sends is answered, on a connection that stays usable: a large but
readable request within the frame cap gets -32602 naming the limit it passed, one over the cap
is refused unread (the rest of its frame skipped, never built), and only bytes that cannot be
read close the connection — logged once, with the reason."""

from __future__ import annotations

import logging

import msgpack
import pytest

from memman import errors
from memman.protocol import pack_request
from tests.helpers import running_daemon
from tests.wire import RawConn

GUARD = 60.0  # seconds: a failure guard, never an expectation of speed


async def _answer(rc: RawConn, msgid: int) -> list:
    out = await rc.outcome(GUARD, until_msgid=msgid)
    assert not out.closed, f"closed without an answer: {out.messages}"
    answers = [m for m in out.messages if m[0] == 1 and m[1] == msgid]
    assert answers, out.messages
    return answers[0]


async def test_metadata_of_500k_keys_within_the_frame_cap_is_refused_naming_the_limit() -> None:
    metadata = {f"k{i}": i for i in range(500_000)}
    frame = pack_request(2, "memman_session_add",
                         ["s", {"role": "user", "content": "hi", "metadata": metadata}])
    async with running_daemon() as d, RawConn.open(d.socket) as rc:
        assert len(frame) < d.server.config.limits.max_message_bytes
        assert (await rc.call(1, "memman_session_open", "s"))[2] is None
        assert await rc.send(frame)
        answer = await _answer(rc, 2)
        assert answer[2][0] == errors.INVALID_PARAMS, answer
        assert "entry.metadata" in answer[2][1] and "100000" in answer[2][1], answer
        assert (await rc.call(3, "memman_ping"))[3] == "pong"
        assert d.app.sessions.get("s").entries == []


async def test_import_of_150k_entries_within_the_frame_cap_is_answered() -> None:
    entries = [{"id": i + 1, "type": "message", "role": "user", "content": "x", "tokens": 1,
                "created_at": 0} for i in range(150_000)]
    frame = pack_request(2, "memman_session_import",
                         [{"format": "memman.session/1", "session_id": "imp", "entries": entries}])
    async with running_daemon(limits={"max_message_bytes": 16 << 20}) as d, \
            RawConn.open(d.socket) as rc:
        assert len(frame) < d.server.config.limits.max_message_bytes
        assert await rc.send(frame)
        answer = await _answer(rc, 2)
        assert answer[2][0] == errors.LIMIT_EXCEEDED, answer
        # the configured limit, and how to raise it
        assert "the 100000 of limits.import_max_entries" in answer[2][1], answer
        assert "import_max_entries = N under [limits] in config.toml" in answer[2][1], answer
        # refused on the count, before the schema walked (and copied) 150k entries
        assert d.app.sessions.by_id.get("imp") is None
        assert (await rc.call(3, "memman_ping"))[3] == "pong"


@pytest.mark.parametrize("payload", [
    {f"key{i:07d}": "v" * 30 for i in range(300_000)},  # many small items
    {"a": "x" * (9 << 20)},  # one text larger than the cap
], ids=["many small items", "one large text"])
async def test_a_request_over_the_frame_cap_is_answered_and_the_connection_kept(
        payload: dict, caplog: pytest.LogCaptureFixture) -> None:
    frame = pack_request(2, "memman_session_add",
                         ["s", {"role": "user", "content": "hi", "metadata": payload}])
    after = pack_request(3, "memman_session_add", ["s", {"role": "user", "content": "after"}])
    async with running_daemon() as d, RawConn.open(d.socket) as rc:
        assert len(frame) > d.server.config.limits.max_message_bytes
        assert (await rc.call(1, "memman_session_open", "s"))[2] is None
        # the next request arrives in the same write as the refused frame's last bytes
        assert await rc.send(frame + after)
        answer = await _answer(rc, 2)
        assert answer[2][0] == errors.INVALID_PARAMS, answer
        assert "limits.max_message_bytes" in answer[2][1], answer
        done = await _answer(rc, 3)
        assert done[2] is None, done
        assert [e.content for e in d.app.sessions.get("s").entries] == ["after"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and "closing" in r.getMessage()]


async def test_unreadable_bytes_close_with_the_reason_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    async with running_daemon() as d, d.client("bystander") as bystander:
        async with RawConn.open(d.socket) as rc:
            await rc.send(pack_request(1, "memman_ping", [])[:5] + b"\xc1" * 64)
            out = await rc.outcome(GUARD)
            assert out.closed and errors.PARSE_ERROR in out.error_codes(), out.messages
        assert await bystander.ping() == "pong"
    closes = [r for r in caplog.records if "closing conn-" in r.getMessage()]
    assert len(closes) == 1 and "malformed msgpack" in closes[0].getMessage(), closes


async def test_an_exception_while_reading_is_answered_not_a_silent_close(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Whatever fails while a frame is read (memory running out, a bug) is said to the client
    and logged; an exception out of the protocol callback would close the socket unanswered."""
    from memman import protocol

    async with running_daemon() as d, d.client("bystander") as bystander:
        real = protocol.FrameDecoder._hand_over

        def failing(self: protocol.FrameDecoder) -> bool:
            if any(bytes(m).find(b"boom") >= 0 for m in self._waiting):
                raise MemoryError("no memory for boom")
            return real(self)

        monkeypatch.setattr(protocol.FrameDecoder, "_hand_over", failing)
        async with RawConn.open(d.socket) as rc:
            await rc.send(msgpack.packb([0, 1, "memman_ping", ["boom"]]))
            out = await rc.outcome(GUARD)
            assert out.closed, out.messages
            assert any("MemoryError" in e["message"] for e in out.errors
                       if isinstance(e, dict)), out.messages
        monkeypatch.setattr(protocol.FrameDecoder, "_hand_over", real)
        assert await bystander.ping() == "pong"
    assert any("reading its bytes failed" in r.getMessage() for r in caplog.records)
