"""The protocol's methods, one module per noun (session, cache, scratchpad, memory, docs, system).

Each method is declared in ``memman/api.py``; importing a module here binds its handlers into
``rpc.REGISTRY``; ``load_all`` imports them all and checks that every declared method has one.
"""


def load_all() -> None:
    """Import every API module (idempotent); raises when a declared method has no handler."""
    from memman_daemon.api import (  # noqa: F401
        cache,
        docs,
        memory,
        scratchpad,
        session,
        system,
    )
    from memman_daemon.rpc import REGISTRY

    REGISTRY.check_complete()
