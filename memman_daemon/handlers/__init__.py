"""Handler modules register their methods into ``rpc.REGISTRY`` when imported."""


def load_all() -> None:
    """Import every handler module (idempotent)."""
    from memman_daemon.handlers import forget, session_engine, spine, tiers  # noqa: F401
