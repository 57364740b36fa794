"""Handler modules register their methods into ``rpc.REGISTRY`` when imported."""


def load_all() -> None:
    """Import every handler module (idempotent)."""
    from memman_daemon.handlers import spine  # noqa: F401
    from memman_daemon.handlers import session_engine  # noqa: F401
    from memman_daemon.handlers import tiers  # noqa: F401
