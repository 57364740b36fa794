"""Error codes and the exception a client raises for an error response.

Errors travel as ``[code, message]``. JSON-RPC codes for protocol faults; memman's own codes
live in -32000..-32099 (the JSON-RPC "server error" range) and are listed in docs/protocol.md.
"""

from __future__ import annotations

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# memman's own range
NOT_FOUND = -32001  # a session, entry, snippet, document... does not exist
CONFLICT = -32002  # a promotion would overwrite a different value
STORAGE_ERROR = -32003  # the database refused a write (read-only, full, corrupt)
LIMIT_EXCEEDED = -32004  # too many clients, message too large
FORBIDDEN = -32005  # peer credentials refused, read-only mode
ALREADY_DONE = -32006  # an idempotent one-time action already happened
SHUTTING_DOWN = -32007  # the daemon is stopping and takes no new work
SHARED_UNAVAILABLE = -32010  # the shared store (PostgreSQL) is down or unreachable: retry

CONNECTION_LOST = -32099  # client side only: the connection closed before an answer arrived


class MemmanError(Exception):
    """An error answer from the daemon (or raised by a handler to produce one).

    Every error a client raises is a ``MemmanError`` carrying ``code``, ``message`` and ``data``;
    ``from_wire`` picks the subclass of the code's family, so callers can write
    ``except SessionNotFound:`` or ``except Busy:`` instead of comparing codes.
    """

    #: the family's code (subclasses); an instance's ``code`` is the code actually received
    family_code: int = INTERNAL_ERROR

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> list:
        if self.data is None:
            return [self.code, self.message]
        return [self.code, self.message, self.data]

    @classmethod
    def from_wire(cls, err: object) -> MemmanError:
        """The exception for an error as it travels: ``[code, message(, data)]``, or
        Neovim-style ``[0|1, "[code] message"]``, or a bare string."""
        if isinstance(err, (list, tuple)) and len(err) >= 2:
            code = err[0] if isinstance(err[0], int) else INTERNAL_ERROR
            msg = err[1].decode(errors="replace") if isinstance(err[1], bytes) else str(err[1])
            data = err[2] if len(err) > 2 else None
            if code in (0, 1):  # Neovim-style: the code is inside the message
                code, msg = _split_code(msg)
            return error_for(code, msg, data)
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        return error_for(*_split_code(str(err)))


def _split_code(text: str) -> tuple[int, str]:
    if text.startswith("[") and "] " in text:
        head, _, rest = text[1:].partition("] ")
        try:
            return int(head), rest
        except ValueError:
            pass
    return INTERNAL_ERROR, text


class _Family(MemmanError):
    """A code family: ``Family(message, data)``; ``code`` defaults to the family's."""

    def __init__(self, message: str = "", data: object = None, code: int | None = None) -> None:
        super().__init__(self.family_code if code is None else code,
                         message or (self.__doc__ or "").strip().splitlines()[0], data)


class InvalidRequest(_Family):
    """The message was not a valid msgpack-rpc request (-32700 parse error, -32600)."""

    family_code = INVALID_REQUEST


class MethodNotFound(_Family):
    """The daemon has no such method (-32601); it may be older than this client."""

    family_code = METHOD_NOT_FOUND


class InvalidParams(_Family):
    """A parameter was missing or of the wrong type (-32602); the message names its path."""

    family_code = INVALID_PARAMS


class InternalError(_Family):
    """The daemon failed on its own account (-32603): a bug, please report it."""

    family_code = INTERNAL_ERROR


class NotFound(_Family):
    """A session, entry, snippet, document... does not exist (-32001)."""

    family_code = NOT_FOUND


class SessionNotFound(NotFound):
    """The session does not exist (-32001, message "session '<id>' not found")."""


class Conflict(_Family):
    """A write would overwrite a different value (-32002); ``data`` has both."""

    family_code = CONFLICT


class StorageError(_Family):
    """The database refused a write; nothing changed (-32003)."""

    family_code = STORAGE_ERROR


class LimitExceeded(_Family):
    """Too many clients, or a message too large (-32004)."""

    family_code = LIMIT_EXCEEDED


class Forbidden(_Family):
    """Refused: peer credentials, or a write on a read-only daemon (-32005)."""

    family_code = FORBIDDEN


class AlreadyDone(_Family):
    """A one-time action already happened (-32006)."""

    family_code = ALREADY_DONE


class Busy(_Family):
    """The daemon is shutting down (or otherwise busy); retry shortly (-32007)."""

    family_code = SHUTTING_DOWN


class SharedStoreUnavailable(_Family):
    """The shared store (PostgreSQL) is down or unreachable; nothing was changed. The daemon
    reconnects by itself: retry after ``data["retry_in_s"]`` (-32010)."""

    family_code = SHARED_UNAVAILABLE


class ConnectionLost(_Family):
    """The connection to the daemon closed before an answer arrived (client side, -32099)."""

    family_code = CONNECTION_LOST

    def __init__(self, message: str = "connection to the memman daemon was lost",
                 data: object = None, code: int | None = None) -> None:
        super().__init__(message, data, code)


#: code -> the exception class raised for it (codes not listed: MemmanError)
ERROR_CLASSES: dict[int, type[_Family]] = {
    PARSE_ERROR: InvalidRequest, INVALID_REQUEST: InvalidRequest,
    METHOD_NOT_FOUND: MethodNotFound, INVALID_PARAMS: InvalidParams,
    INTERNAL_ERROR: InternalError, NOT_FOUND: NotFound, CONFLICT: Conflict,
    STORAGE_ERROR: StorageError, LIMIT_EXCEEDED: LimitExceeded, FORBIDDEN: Forbidden,
    ALREADY_DONE: AlreadyDone, SHUTTING_DOWN: Busy, CONNECTION_LOST: ConnectionLost,
    SHARED_UNAVAILABLE: SharedStoreUnavailable,
}


def error_for(code: int, message: str, data: object = None) -> MemmanError:
    """The exception of ``code``'s family (``SessionNotFound`` for a missing session)."""
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return MemmanError(code, message, data)
    if cls is NotFound and message.startswith("session "):
        cls = SessionNotFound
    return cls(message, data, code)


ERROR_STYLES = ("memman", "nvim")  #: memman_set_client_info(name, {errors: ...})


def styled(wire: list, style: str) -> list:
    """An error as a connection asked for it: memman's ``[code, message(, data)]``, or
    Neovim's ``[0, "[code] message"]`` (what ``vim.rpcrequest`` can show)."""
    if style == "nvim":
        return [0, f"[{wire[0]}] {wire[1]}"]
    return wire


def invalid_params(name: str, why: str) -> MemmanError:
    return MemmanError(INVALID_PARAMS, f"invalid parameter '{name}': {why}")


def not_found(what: str, ident: object) -> MemmanError:
    return MemmanError(NOT_FOUND, f"{what} {ident!r} not found")
