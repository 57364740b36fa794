"""The protocol's methods, one module per noun (session, cache, scratchpad, memory, docs, system).

Importing a module registers its methods into ``rpc.REGISTRY``; ``load_all`` imports them all.
"""


def load_all() -> None:
    """Import every API module (idempotent)."""
    from memman_daemon.api import (  # noqa: F401
        cache,
        docs,
        memory,
        scratchpad,
        session,
        system,
    )
