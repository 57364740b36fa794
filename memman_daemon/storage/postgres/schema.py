"""The shared store's PostgreSQL schema and its migrations.

``memman_schema.version`` holds the version; MIGRATIONS[i] moves a database from version i to
i+1, each in its own transaction under an advisory lock, so daemons starting together migrate
once. A daemon refuses a database whose version is newer than it knows. Add a migration at
the end; never edit one that has shipped.

The tables mirror the SQLite ones (``memman_daemon/schema.py``) so records keep their shape:
JSON columns stay text (what was written is what is read back), times stay unix seconds. Ids
of every shared table come from one sequence, ``memman_ids``, so two daemons never hand out
the same id. Full text: a stored ``tsvector`` column with a GIN index ('english' config).
``dedup`` holds what must be unique among live records (a preference's key, a rule's
condition, a playbook's flow + normalized query): the partial unique index on it is what lets
the database decide between two daemons promoting the same key at once.
"""

from memman_daemon.storage.sqlite.schema import AUDIT_COLUMNS

MIGRATIONS: list[str] = [
    # v1
    """
    CREATE SEQUENCE memman_ids;
    CREATE TABLE memories (
        id          BIGINT PRIMARY KEY,
        user_id     TEXT NOT NULL,
        type        TEXT NOT NULL,
        kind        TEXT NOT NULL,
        key         TEXT,
        content     TEXT NOT NULL,
        metadata    TEXT NOT NULL DEFAULT '{}',
        created_at  DOUBLE PRECISION NOT NULL,
        updated_at  DOUBLE PRECISION NOT NULL,
        archived_by BIGINT,
        dedup       TEXT,
        tsv         TSVECTOR GENERATED ALWAYS AS (
                        to_tsvector('english', coalesce(key, '') || ' ' || content)) STORED
    );
    CREATE INDEX memories_user ON memories(user_id, type, id);
    CREATE INDEX memories_tsv ON memories USING gin(tsv);
    CREATE UNIQUE INDEX memories_live ON memories(user_id, kind, dedup)
        WHERE dedup IS NOT NULL AND archived_by IS NULL;
    CREATE TABLE memory_vectors (
        id        BIGINT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
        dim       INTEGER NOT NULL,
        embedding BYTEA NOT NULL          -- float32 little-endian, as in SQLite
    );
    CREATE TABLE docs (
        id        BIGINT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        doc_id    TEXT NOT NULL,
        data      TEXT NOT NULL,           -- Doc as JSON, as in SQLite
        UNIQUE (tenant_id, doc_id)
    );
    CREATE TABLE doc_chunks (
        id        BIGINT PRIMARY KEY,
        doc       BIGINT NOT NULL REFERENCES docs(id) ON DELETE CASCADE,
        tenant_id TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        tokens    INTEGER NOT NULL,
        content   TEXT NOT NULL,
        tsv       TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
    );
    CREATE INDEX doc_chunks_doc ON doc_chunks(doc, seq);
    CREATE INDEX doc_chunks_tenant ON doc_chunks(tenant_id);
    CREATE INDEX doc_chunks_tsv ON doc_chunks USING gin(tsv);
    CREATE TABLE chunk_vectors (
        id        BIGINT PRIMARY KEY REFERENCES doc_chunks(id) ON DELETE CASCADE,
        tenant_id TEXT NOT NULL,
        dim       INTEGER NOT NULL,
        embedding BYTEA NOT NULL
    );
    CREATE INDEX chunk_vectors_tenant ON chunk_vectors(tenant_id);
    CREATE TABLE agent_md (
        tenant_id  TEXT PRIMARY KEY,
        content    TEXT NOT NULL,
        hash       TEXT NOT NULL,          -- sha256 of content
        updated_at DOUBLE PRECISION NOT NULL,
        updated_by TEXT NOT NULL,          -- host:pid of the daemon that wrote it
        version    BIGINT NOT NULL DEFAULT 1
    );
    CREATE TABLE audit (
        id         BIGINT PRIMARY KEY,
        at         DOUBLE PRECISION NOT NULL,
        """ + AUDIT_COLUMNS + """,
        host       TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX audit_user ON audit(user_id, id);
    CREATE INDEX audit_tenant ON audit(tenant_id, id);
    -- memman shared migrate: which local record became which shared one (idempotent, resumable)
    CREATE TABLE migrated (
        source  TEXT NOT NULL,             -- host:path of the SQLite file
        tbl     TEXT NOT NULL,
        old_id  BIGINT NOT NULL,
        new_id  BIGINT NOT NULL,
        PRIMARY KEY (source, tbl, old_id)
    );
    """,
    # v2: the model that made each vector (one of another model is re-embedded)
    """
    ALTER TABLE memory_vectors ADD COLUMN model TEXT NOT NULL DEFAULT '';
    ALTER TABLE chunk_vectors ADD COLUMN model TEXT NOT NULL DEFAULT '';
    """,
    # v3 (part rcl, recall across hosts; storage/postgres/recall.py): one row per entry of a
    # user's sessions, keyed by the daemon's database and the entry's id there; every change
    # takes the next recall_seq (the others read what changed since the last one they saw)
    """
    CREATE SEQUENCE recall_seq;
    CREATE TABLE recall_rows (
        id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        origin     TEXT NOT NULL,           -- host:path of the daemon's SQLite file
        entry_id   BIGINT NOT NULL,         -- the entry's id in that file
        session_id TEXT NOT NULL,           -- the session on that host
        tenant_id  TEXT NOT NULL,
        user_id    TEXT NOT NULL,
        type       TEXT NOT NULL,
        role       TEXT NOT NULL,
        name       TEXT,
        content    TEXT NOT NULL,
        text       TEXT NOT NULL,           -- what it is indexed as
        created_at DOUBLE PRECISION NOT NULL,
        model      TEXT NOT NULL DEFAULT '', -- the search model its origin embeds with
        gone       BOOLEAN NOT NULL DEFAULT false, -- removed (a tombstone, text emptied)
        seq        BIGINT NOT NULL,
        UNIQUE (origin, entry_id)
    );
    CREATE INDEX recall_rows_seq ON recall_rows(seq);
    CREATE INDEX recall_rows_session ON recall_rows(origin, session_id);
    CREATE TABLE recall_row_vectors (
        id        BIGINT NOT NULL REFERENCES recall_rows(id) ON DELETE CASCADE,
        model     TEXT NOT NULL,
        embedding BYTEA NOT NULL,           -- float32 little-endian, unit length
        seq       BIGINT NOT NULL,
        PRIMARY KEY (id, model)
    );
    CREATE INDEX recall_row_vectors_seq ON recall_row_vectors(seq);
    """,
    # v4: a tombstone another host's forget made (memman_memory_forget of a recalled entry):
    # its origin keeps the entry in its session and never shares it again
    """
    ALTER TABLE recall_rows ADD COLUMN forgotten BOOLEAN NOT NULL DEFAULT false;
    """,
    # v5: a row's packed token vectors (4 bits a dimension, at most 16 tokens: search/late.py),
    # written by whichever daemon embedded it, so every host ranks the others' rows by MaxSim
    # without embedding them again (SQLite's recall_tokens, shared)
    """
    CREATE TABLE recall_row_tokens (
        id     BIGINT NOT NULL REFERENCES recall_rows(id) ON DELETE CASCADE,
        model  TEXT NOT NULL,
        n      SMALLINT NOT NULL,           -- tokens kept
        packed BYTEA NOT NULL,              -- (16, dim / 2 + 2) uint8
        seq    BIGINT NOT NULL,
        PRIMARY KEY (id, model)
    );
    CREATE INDEX recall_row_tokens_seq ON recall_row_tokens(seq);
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)

#: optional, outside the versioned migrations: where the server has pgvector, a vector copy of
#: each embedding for `<=>` ranking (the bytea column stays the record)
PGVECTOR_DDL = """
    ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS vec vector;
    ALTER TABLE chunk_vectors ADD COLUMN IF NOT EXISTS vec vector;
"""
