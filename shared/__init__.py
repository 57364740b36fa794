"""memman: a memory manager for LLM agents — the client side and the shared protocol.

    from memman import SyncClient
    with SyncClient() as mm:
        mm.session_open("s1")
        mm.session_add("s1", {"role": "user", "content": "hello"})
        messages = mm.session_context("s1")["messages"]
"""

__version__ = "0.1.0"

from memman.errors import (  # noqa: E402
    AlreadyDone,
    Busy,
    Conflict,
    ConnectionLost,
    Forbidden,
    InternalError,
    InvalidParams,
    InvalidRequest,
    LimitExceeded,
    MemmanError,
    MethodNotFound,
    NotFound,
    SessionNotFound,
    SharedStoreUnavailable,
    StorageError,
)

__all__ = ["__version__", "MemmanError", "Client", "SyncClient", "RetryPolicy", "AlreadyDone",
           "Busy", "Conflict", "ConnectionLost", "Forbidden", "InternalError", "InvalidParams",
           "InvalidRequest", "LimitExceeded", "MethodNotFound", "NotFound", "SessionNotFound",
           "StorageError", "SharedStoreUnavailable"]


def __getattr__(name: str):  # lazy, so `import memman` stays light for the daemon
    if name == "RetryPolicy":
        from memman.reconnect import RetryPolicy
        return RetryPolicy
    if name == "Client":
        from memman.client import Client
        return Client
    if name == "SyncClient":
        from memman.sync_client import SyncClient
        return SyncClient
    raise AttributeError(name)
