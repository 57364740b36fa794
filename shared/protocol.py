"""msgpack-rpc framing (Neovim's conventions): bytes <-> msgpack objects <-> messages.

No length prefix: a stream of msgpack objects. ``FrameDecoder`` wraps a bounded
``msgpack.Unpacker`` fed from the socket; ``parse`` turns one decoded object into a
``Request``, ``Response`` or ``Notification`` (or raises ``ProtocolError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import msgpack

from memman.errors import INVALID_REQUEST, PARSE_ERROR, MemmanError

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2


@dataclass(slots=True)
class Request:
    msgid: int
    method: str
    params: Any


@dataclass(slots=True)
class Response:
    msgid: int
    error: Any
    result: Any


@dataclass(slots=True)
class Notification:
    method: str
    params: Any


Message = Request | Response | Notification


class ProtocolError(MemmanError):
    """A frame that cannot be understood. ``msgid`` is set when an answer can be addressed."""

    def __init__(self, code: int, message: str, msgid: int | None = None) -> None:
        super().__init__(code, message)
        self.msgid = msgid


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def pack_request(msgid: int, method: str, params: list[Any] | tuple[Any, ...]) -> bytes:
    return pack([REQUEST, msgid, method, list(params)])


def pack_response(msgid: int, error: Any, result: Any) -> bytes:
    return pack([RESPONSE, msgid, error, result])


def pack_notification(method: str, params: list[Any]) -> bytes:
    return pack([NOTIFICATION, method, params])


class FrameRefused(ProtocolError):
    """A frame that can be read but is refused (over the size cap, too many containers): the
    decoder skips the rest of it without building it and goes on with the next frame, so the
    request is answered (``msgid``, when its envelope gave one) and the connection stays usable."""


class FrameDecoder:
    """Incremental decoder with a bounded frame.

    ``feed(data)`` then iterate: yields decoded objects. ``pending`` is the number of bytes of a
    frame that has started but not finished (used for the half-frame timeout).

    The cap is on the bytes of one frame, whatever its shape. msgpack's own ``max_buffer_size``
    bounds only the bytes not yet parsed: a frame of many small nested items is consumed as it
    arrives and built up in memory without end. So the bytes are handed to the unpacker in
    slices that never take the current frame past ``max_message_bytes``; one more byte of an
    unfinished frame at the cap is refused. And since one byte can make a container (``[]`` is
    1 byte, ~60 in memory), a frame may hold at most one array or map per
    ``BYTES_PER_CONTAINER`` bytes of the cap: a real message is far sparser.

    A refused frame is still well-formed msgpack: iterating raises ``FrameRefused`` once, then
    the rest of that frame is skipped by a second unpacker that builds nothing (msgpack's
    ``skip``, resumable as bytes arrive; the frame's bytes received so far are kept — references
    to the received chunks, at most the cap — so it can start at the frame's first byte), and
    decoding resumes after it. Only bytes that are not msgpack, or an item too large to skip
    within the cap's buffer, raise a plain ``ProtocolError``: then the stream cannot be followed.
    """

    #: a frame of the cap may hold cap / this many arrays and maps (8 MiB: 1M, ~70 MB in memory)
    BYTES_PER_CONTAINER = 8
    #: a refused frame is skipped unless one item in it is over this many times the cap
    SKIP_BUFFER = 4

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes
        self.max_containers = max(1, max_message_bytes // self.BYTES_PER_CONTAINER)
        # the hook is its own object, not a method of this decoder: a bound method would make a
        # reference cycle (decoder -> unpacker -> hook -> decoder) that only a full garbage
        # collection frees, ~40 KB per closed connection
        self._containers = _ContainerCount(self.max_containers)
        self._unpacker = self._new_unpacker()
        self._fed = 0  #: stream offset of the bytes handed to the unpacker
        self._complete = 0  #: stream offset where the last whole object ended
        self._waiting: list[memoryview] = []  #: fed, not yet handed to the unpacker
        #: the pieces handed to the unpacker since the stream offset ``_kept_at``: the current
        #: frame's bytes, for the skipper should the frame be refused
        self._kept: list[memoryview] = []
        self._kept_at = 0
        self._skipper: Any = None  #: set while a refused frame is skipped
        self._skip_fed = 0

    def _new_unpacker(self) -> Any:
        self._containers.n = 0
        return msgpack.Unpacker(raw=False, max_buffer_size=self.max_message_bytes,
                                strict_map_key=False, list_hook=self._containers,
                                object_hook=self._containers)

    def feed(self, data: bytes) -> None:
        if data:
            self._waiting.append(memoryview(data))

    @property
    def skipping(self) -> bool:
        return self._skipper is not None

    @property
    def pending(self) -> int:
        """Bytes of an object that has started but not finished (received ones included).
        (Not ``fed - tell()``: msgpack's ``tell()`` moves past the headers of a container still
        being filled.)"""
        waiting = sum(len(m) for m in self._waiting)
        if self._skipper is not None:
            return max(1, self._skip_fed - self._skipper.tell() + waiting)
        return self._fed - self._complete + waiting

    def __iter__(self) -> FrameDecoder:
        return self

    def __next__(self) -> Any:
        while True:
            if self._skipper is not None:
                self._skip()
            try:
                obj = next(self._unpacker)
            except StopIteration:
                if not self._hand_over():
                    raise
                continue
            except _TooManyContainers:
                self._refuse(f"message with more than {self.max_containers} arrays and maps (one "
                             f"per {self.BYTES_PER_CONTAINER} bytes of limits.max_message_bytes)")
            except ValueError as exc:
                if "exceeds max_" in str(exc):  # an array or map declared longer than the cap
                    self._refuse(f"message larger than the {self.max_message_bytes}-byte limit "
                                 f"(limits.max_message_bytes): {exc}")
                self._fail(exc)
            except (TypeError, msgpack.UnpackException, UnicodeDecodeError,
                    RecursionError) as exc:
                self._fail(exc)
            self._complete = self._unpacker.tell()
            self._containers.n = 0
            self._drop_kept()
            return obj

    def _fail(self, exc: Exception) -> NoReturn:
        """FormatError, StackError, ExtraData, invalid UTF-8, a map keyed by an array or a map
        (unhashable): the stream cannot be followed."""
        self._waiting.clear()
        self._kept.clear()
        raise ProtocolError(PARSE_ERROR, f"malformed msgpack: {type(exc).__name__}: {exc}"
                            .rstrip(": ")) from None

    def _drop_kept(self) -> None:
        """Forget the kept pieces wholly before the end of the last whole frame."""
        kept = self._kept
        while kept and self._kept_at + len(kept[0]) <= self._complete:
            self._kept_at += len(kept.pop(0))

    def _hand_over(self) -> bool:
        """Give the unpacker the next slice of waiting bytes, no more than the current frame
        may still grow by; False when nothing is waiting."""
        if not self._waiting:
            return False
        room = self.max_message_bytes - (self._fed - self._complete)
        if room <= 0:
            self._refuse(f"message larger than the {self.max_message_bytes}-byte limit "
                         "(limits.max_message_bytes)")
        piece = self._take(room)
        try:
            self._unpacker.feed(piece)
        except msgpack.BufferFull:  # cannot happen with room <= max_buffer_size; kept as a guard
            self._waiting.insert(0, piece)
            self._refuse(f"message larger than the {self.max_message_bytes}-byte limit "
                         "(limits.max_message_bytes)")
        self._kept.append(piece)
        self._fed += len(piece)
        return True

    def _take(self, room: int) -> memoryview:
        """The next waiting bytes, at most ``room`` of them (the rest of a piece stays first)."""
        head = self._waiting[0]
        piece = head[:room]
        if len(piece) == len(head):
            self._waiting.pop(0)
        else:
            self._waiting[0] = head[room:]
        return piece

    def _refuse(self, why: str) -> NoReturn:
        """Start skipping the current frame from its first byte; raise ``FrameRefused``."""
        skip = self._complete - self._kept_at  # bytes of the kept pieces before this frame
        frame: list[memoryview] = []
        for piece in self._kept:
            if skip >= len(piece):
                skip -= len(piece)
                continue
            frame.append(piece[skip:])
            skip = 0
        self._kept = []
        self._waiting[:0] = frame
        msgid = _request_msgid(frame)
        # the skipper needs one whole item in its buffer: room for a single text of a few
        # times the cap (a pasted file too large to send), freed as soon as it is skipped
        # (skipping builds nothing, so declared counts need no bound of their own)
        self._skipper = msgpack.Unpacker(max_buffer_size=self.SKIP_BUFFER * self.max_message_bytes,
                                         max_array_len=2**32 - 1, max_map_len=2**32 - 1)
        self._skip_fed = 0
        self._unpacker = self._new_unpacker()  # the refused frame's partial objects go with it
        self._fed = self._complete = self._kept_at = 0
        raise FrameRefused(PARSE_ERROR, why, msgid)

    def _skip(self) -> None:
        """Feed the skipper what has arrived; raise StopIteration until the refused frame has
        ended, then hand what follows it back to decoding."""
        skipper = self._skipper
        while True:
            try:
                skipper.skip()
                break
            except msgpack.OutOfData:
                pass
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                self._waiting.clear()
                raise ProtocolError(PARSE_ERROR, f"malformed msgpack: {type(exc).__name__}: {exc}"
                                    .rstrip(": ")) from None
            if not self._waiting:
                raise StopIteration
            room = self.SKIP_BUFFER * self.max_message_bytes - (self._skip_fed - skipper.tell())
            if room <= 0:  # one item larger than the skipper's buffer: cannot be followed
                self._waiting.clear()
                raise ProtocolError(PARSE_ERROR, "message larger than the "
                                    f"{self.max_message_bytes}-byte limit "
                                    "(limits.max_message_bytes) holding one item over "
                                    f"{self.SKIP_BUFFER} times that, too large to skip")
            piece = self._take(room)
            skipper.feed(piece)
            self._skip_fed += len(piece)
        rest = skipper.read_bytes(self._skip_fed - skipper.tell())
        self._skipper = None
        if rest:
            self._waiting.insert(0, memoryview(rest))


def _request_msgid(frame: list[memoryview]) -> int | None:
    """The msgid of a request frame from its first bytes ([0, msgid, ...]), when they say."""
    head = b"".join(bytes(p[:16]) for p in frame[:4])[:16]
    if len(head) < 3 or head[0] != 0x94 or head[1] != REQUEST:
        return None
    b = head[2]
    if b <= 0x7F:
        return b
    width = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.get(b)
    if width is None or len(head) < 3 + width:
        return None
    msgid = int.from_bytes(head[3:3 + width], "big")
    return msgid if msgid < 2**32 else None


class _TooManyContainers(Exception):
    pass


class _ContainerCount:
    """msgpack's list and object hook: counts the arrays and maps of the current frame."""

    __slots__ = ("n", "cap")

    def __init__(self, cap: int) -> None:
        self.n = 0
        self.cap = cap

    def __call__(self, container: Any) -> Any:
        self.n += 1
        if self.n > self.cap:
            raise _TooManyContainers
        return container


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):  # method names may arrive as bin
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return None
    return None


def parse(obj: Any) -> Message:
    """Classify one decoded msgpack object (raises ProtocolError for a bad shape)."""
    if not isinstance(obj, (list, tuple)) or not obj:
        raise ProtocolError(INVALID_REQUEST, "a message must be an array [type, ...]")
    kind = obj[0]
    if kind == REQUEST:
        msgid = obj[1] if len(obj) > 1 and isinstance(obj[1], int) and not isinstance(obj[1], bool) else None
        if len(obj) != 4:
            raise ProtocolError(INVALID_REQUEST, f"a request is [0, msgid, method, params]; got {len(obj)} elements",
                                msgid)
        if msgid is None or not 0 <= msgid < 2**32:
            raise ProtocolError(INVALID_REQUEST, "msgid must be an unsigned 32-bit integer")
        method = _text(obj[2])
        if method is None:
            raise ProtocolError(INVALID_REQUEST, "method name must be a string", msgid)
        return Request(msgid, method, obj[3])
    if kind == RESPONSE:
        if len(obj) != 4 or not isinstance(obj[1], int):
            raise ProtocolError(INVALID_REQUEST, "a response is [1, msgid, error, result]")
        return Response(obj[1], obj[2], obj[3])
    if kind == NOTIFICATION:
        if len(obj) != 3:
            raise ProtocolError(INVALID_REQUEST, f"a notification is [2, method, params]; got {len(obj)} elements")
        method = _text(obj[1])
        if method is None:
            raise ProtocolError(INVALID_REQUEST, "notification name must be a string")
        return Notification(method, obj[2])
    raise ProtocolError(INVALID_REQUEST, f"unknown message type {kind!r} (0 request, 1 response, 2 notification)")
