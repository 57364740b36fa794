"""Search plumbing: full-text (FTS5), vectors and embedders, hybrid ranking, re-embedding."""
