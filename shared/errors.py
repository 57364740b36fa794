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


class MemmanError(Exception):
    """An error answer from the daemon (or raised by a handler to produce one)."""

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
        if isinstance(err, (list, tuple)) and len(err) >= 2:
            code = err[0] if isinstance(err[0], int) else INTERNAL_ERROR
            msg = err[1].decode() if isinstance(err[1], bytes) else str(err[1])
            return cls(code, msg, err[2] if len(err) > 2 else None)
        return cls(INTERNAL_ERROR, str(err))


class ConnectionLost(MemmanError):
    """The connection to the daemon closed before an answer arrived."""

    def __init__(self, message: str = "connection to the memman daemon was lost") -> None:
        super().__init__(INTERNAL_ERROR, message)


def invalid_params(name: str, why: str) -> MemmanError:
    return MemmanError(INVALID_PARAMS, f"invalid parameter '{name}': {why}")


def not_found(what: str, ident: object) -> MemmanError:
    return MemmanError(NOT_FOUND, f"{what} {ident!r} not found")
