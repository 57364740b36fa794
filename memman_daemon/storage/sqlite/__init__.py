"""Repositories: the SQL of one table group each, as ops (``(sql, params)``) for the store's
group commit and as readers. Nothing above this package writes SQL for these tables."""
