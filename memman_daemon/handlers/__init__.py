"""Handler modules register their methods into ``rpc.REGISTRY`` when imported."""


def load_all() -> None:
    """Import every handler module (idempotent)."""
    from memman_daemon.handlers import (  # noqa: F401
        clients,
        forget,
        series,
        session_engine,
        spine,
        tiers,
        undo,
    )
