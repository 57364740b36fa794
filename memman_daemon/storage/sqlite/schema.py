"""SQLite schema and its migrations.

``PRAGMA user_version`` holds the version; MIGRATIONS[i] moves a database from version i to
i+1. Add a migration at the end; never edit one that has shipped.

Session objects are stored as JSON documents keyed by id (the daemon serves reads from memory,
so SQLite only has to be a durable, loadable record); tables that are searched (user memory,
documents) have real columns and FTS5 indexes.
"""

from __future__ import annotations

import sqlite3

#: the audit table's columns after ``id`` and ``at``; the shared store's audit
#: (``shared_store/schema.py``) has the same, and the daemon that wrote the row
AUDIT_COLUMNS = """action     TEXT NOT NULL,       -- promote, evict, expire, replace, ...
        what       TEXT NOT NULL,
        source     TEXT NOT NULL,
        target     TEXT NOT NULL,
        client     TEXT NOT NULL,
        session_id TEXT,
        user_id    TEXT,
        tenant_id  TEXT,
        data       TEXT NOT NULL DEFAULT '{}'"""

MIGRATIONS: list[str] = [
    # v1: sessions, the entry log, compression summaries
    """
    CREATE TABLE sessions (
        id   TEXT PRIMARY KEY,
        meta TEXT NOT NULL              -- SessionMeta as JSON
    );
    CREATE TABLE entries (
        id         INTEGER PRIMARY KEY, -- Entry.id
        session_id TEXT NOT NULL,
        data       TEXT NOT NULL        -- Entry as JSON
    );
    CREATE INDEX entries_session ON entries(session_id, id);
    CREATE TABLE summaries (
        id         INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        data       TEXT NOT NULL        -- Summary as JSON
    );
    CREATE INDEX summaries_session ON summaries(session_id, id);
    """,
    # v2: tool cache, scratchpad, audit log, user memory, business documents
    """
    CREATE TABLE tool_cache (
        session_id TEXT NOT NULL,
        key        TEXT NOT NULL,       -- md5 of "{tool}:{json.dumps(params, sort_keys=True)}"
        data       TEXT NOT NULL,       -- CacheEntry as JSON
        PRIMARY KEY (session_id, key)
    );
    CREATE TABLE scratchpad (
        id         INTEGER PRIMARY KEY, -- Snippet.id
        session_id TEXT NOT NULL,
        data       TEXT NOT NULL        -- Snippet as JSON
    );
    CREATE INDEX scratchpad_session ON scratchpad(session_id);
    CREATE TABLE audit (
        id         INTEGER PRIMARY KEY,
        at         REAL NOT NULL,
        """ + AUDIT_COLUMNS + """
    );
    CREATE INDEX audit_session ON audit(session_id, id);
    CREATE INDEX audit_user ON audit(user_id, id);
    CREATE TABLE memories (
        id          INTEGER PRIMARY KEY,
        user_id     TEXT NOT NULL,
        type        TEXT NOT NULL,      -- episodic, semantic, procedural
        kind        TEXT NOT NULL,      -- entry, preference, rule, playbook, summary
        key         TEXT,               -- preference key, rule condition, playbook flow
        content     TEXT NOT NULL,
        metadata    TEXT NOT NULL DEFAULT '{}',
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        archived_by INTEGER             -- compacted into this summary (kept, not searched)
    );
    CREATE INDEX memories_user ON memories(user_id, type, id);
    CREATE INDEX memories_key ON memories(user_id, kind, key);
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        key, content, content='memories', content_rowid='id', tokenize='porter unicode61');
    CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts(rowid, key, content) VALUES (new.id, coalesce(new.key, ''), new.content);
    END;
    CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, key, content)
            VALUES ('delete', old.id, coalesce(old.key, ''), old.content);
    END;
    CREATE TRIGGER memories_au AFTER UPDATE OF key, content ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, key, content)
            VALUES ('delete', old.id, coalesce(old.key, ''), old.content);
        INSERT INTO memories_fts(rowid, key, content) VALUES (new.id, coalesce(new.key, ''), new.content);
    END;
    CREATE TABLE memory_vectors (
        id        INTEGER PRIMARY KEY,  -- memories.id
        dim       INTEGER NOT NULL,
        embedding BLOB NOT NULL         -- float32 little-endian (sqlite-vec's vector format)
    );
    CREATE TABLE docs (
        id         INTEGER PRIMARY KEY,
        tenant_id  TEXT NOT NULL,
        doc_id     TEXT NOT NULL,
        data       TEXT NOT NULL,       -- Doc as JSON (title, source, metadata, hash, ...)
        UNIQUE (tenant_id, doc_id)
    );
    CREATE TABLE doc_chunks (
        id        INTEGER PRIMARY KEY,
        doc       INTEGER NOT NULL,     -- docs.id
        tenant_id TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        tokens    INTEGER NOT NULL,
        content   TEXT NOT NULL
    );
    CREATE INDEX doc_chunks_doc ON doc_chunks(doc, seq);
    CREATE VIRTUAL TABLE doc_chunks_fts USING fts5(
        content, content='doc_chunks', content_rowid='id', tokenize='porter unicode61');
    CREATE TRIGGER doc_chunks_ai AFTER INSERT ON doc_chunks BEGIN
        INSERT INTO doc_chunks_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER doc_chunks_ad AFTER DELETE ON doc_chunks BEGIN
        INSERT INTO doc_chunks_fts(doc_chunks_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END;
    CREATE TABLE chunk_vectors (
        id        INTEGER PRIMARY KEY,  -- doc_chunks.id
        tenant_id TEXT NOT NULL,
        dim       INTEGER NOT NULL,
        embedding BLOB NOT NULL
    );
    """,
    # v3: the model that made each vector (a vector of another model is re-embedded)
    """
    ALTER TABLE memory_vectors ADD COLUMN model TEXT NOT NULL DEFAULT '';
    ALTER TABLE chunk_vectors ADD COLUMN model TEXT NOT NULL DEFAULT '';
    """,
    # v4: the usage series — sent and history tokens of each session over time (the TUI chart)
    """
    CREATE TABLE usage_series (
        id             INTEGER PRIMARY KEY,
        session_id     TEXT NOT NULL,
        at             REAL NOT NULL,   -- unix seconds
        kind           TEXT NOT NULL,   -- context, exchange, compaction
        exchange       INTEGER NOT NULL, -- finalized cycles of the session at that moment
        sent_tokens    INTEGER,         -- what the LLM received (NULL: not known at that moment)
        history_tokens INTEGER NOT NULL, -- the whole active log
        budget         INTEGER NOT NULL,
        data           TEXT NOT NULL DEFAULT '{}'  -- pruned, band, tokens_saved, ...
    );
    CREATE INDEX usage_series_session ON usage_series(session_id, id);
    """,
    # v5: one live preference / rule per user and key, decided by the database. Duplicates
    # left by concurrent learns before it: the newest stays live, the others are archived
    # (archived_by 0: kept, not searched), so nothing is lost
    """
    UPDATE memories SET archived_by = 0
     WHERE kind IN ('preference', 'rule') AND archived_by IS NULL
       AND EXISTS (SELECT 1 FROM memories AS n
                    WHERE n.user_id = memories.user_id AND n.kind = memories.kind
                      AND n.key IS memories.key AND n.archived_by IS NULL
                      AND (n.updated_at > memories.updated_at
                           OR (n.updated_at = memories.updated_at AND n.id > memories.id)));
    CREATE UNIQUE INDEX memories_live ON memories(user_id, kind, key)
     WHERE kind IN ('preference', 'rule') AND archived_by IS NULL;
    """,
    # v6: the recall index (repositories/recall.py) — the search model's vector of each
    # session entry, so a restart does not re-embed; entries a session excludes from recall
    """
    CREATE TABLE recall_vectors (
        entry_id   INTEGER PRIMARY KEY,  -- entries.id
        session_id TEXT NOT NULL,
        model      TEXT NOT NULL,
        embedding  BLOB NOT NULL         -- float32 little-endian, unit length
    );
    CREATE INDEX recall_vectors_session ON recall_vectors(session_id);
    CREATE TABLE recall_exclusions (
        session_id TEXT NOT NULL,        -- the session that no longer recalls it
        entry_id   INTEGER NOT NULL,     -- the recalled entry (of another session)
        at         REAL NOT NULL,
        PRIMARY KEY (session_id, entry_id)
    );
    """,
    # v7: entries of this daemon that a user forgot for recall on another host (with
    # [storage] shared); they stay in their session, no other session recalls them
    """
    CREATE TABLE recall_forgotten (
        entry_id   INTEGER PRIMARY KEY,  -- entries.id
        session_id TEXT NOT NULL,
        created_at REAL NOT NULL,        -- the entry's: an id used again is another entry
        at         REAL NOT NULL
    );
    CREATE INDEX recall_forgotten_session ON recall_forgotten(session_id);
    """,
    # v8: the store's identity (storage/sqlite/identity.py): its origin among the daemons of a
    # shared store, generated once here and carried along when the file is moved or copied
    """
    CREATE TABLE store_identity (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    INSERT INTO store_identity(key, value) VALUES ('origin', lower(hex(randomblob(16))));
    -- what a forgotten entry said (recall/index.py's forget_digest): an import that brings it
    -- back under a new id, or a session reassigned, keeps it forgotten ('' in older rows: the
    -- entry id and time only)
    ALTER TABLE recall_forgotten ADD COLUMN digest TEXT NOT NULL DEFAULT '';
    """,
    # v9: the packed token vectors of each session entry (late interaction, search/late.py),
    # beside its vector, so that a restart does not re-embed
    """
    CREATE TABLE recall_tokens (
        entry_id   INTEGER PRIMARY KEY,  -- entries.id
        session_id TEXT NOT NULL,
        model      TEXT NOT NULL,
        n          INTEGER NOT NULL,     -- token vectors kept (at most late.TOKENS)
        packed     BLOB NOT NULL         -- TOKENS x (dim/2 4-bit values + a float16 scale)
    );
    CREATE INDEX recall_tokens_session ON recall_tokens(session_id);
    """,
    # v10: what an excluded row of another daemon said (recall/index.py's said_key): the
    # same statement written again there under a new id (its session replaced by an import)
    # stays excluded, also when this daemon was down or stopped before it read the change
    """
    ALTER TABLE recall_exclusions ADD COLUMN said TEXT NOT NULL DEFAULT '';
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)

#: the index the v5 migration creates; a file at version 5 without it is the other version 5
_V5_INDEX = "memories_live"


def renumbered(db: sqlite3.Connection, version: int) -> int:
    """The version a file really is at, after bringing one that main wrote under a number
    that later went to another migration back onto this list. For a short while main's v5
    was the recall index (what is v6 now); the one-live-preference migration then took v5
    and the recall index became v6. Such a file says 5 but holds the recall tables and lacks
    ``memories_live``: it gets the v5 migration and is then at 6 (running v6 on it failed
    with "table recall_vectors already exists")."""
    if version == 5 and _exists(db, "table", "recall_vectors") \
            and not _exists(db, "index", _V5_INDEX):
        db.executescript(f"BEGIN;\n{MIGRATIONS[4]}\nPRAGMA user_version=6;\nCOMMIT;")
        return 6
    return version


def _exists(db: sqlite3.Connection, kind: str, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type=? AND name=?",
                      (kind, name)).fetchone() is not None
