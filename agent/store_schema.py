"""The agent's tables in ``state.db`` and their migrations.

Each migration is a list of statements applied in one transaction (``agent.db.migrate``); the
``schema_versions`` row of the "agent" component records the version reached. Add a migration to
change the schema; never edit a released one.
"""

from __future__ import annotations

import sqlite3

from agent.db import SCHEMA_VERSIONS_TABLE, immediate

MIGRATIONS: list[list[str]] = [
    [
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            session_key TEXT NOT NULL,
            source TEXT NOT NULL,
            platform TEXT NOT NULL,
            chat_id TEXT,
            user_id TEXT,
            title TEXT,
            system_prompt TEXT NOT NULL,
            tools_json TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0,
            estimated_cost REAL NOT NULL DEFAULT 0,
            uncached_cost REAL NOT NULL DEFAULT 0,
            last_prompt_tokens INTEGER,
            todos_json TEXT NOT NULL DEFAULT '[]'
        )
        """,
        "CREATE INDEX sessions_by_key ON sessions(session_key, updated_at)",
        "CREATE INDEX sessions_by_update ON sessions(updated_at)",
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            position REAL NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            tool_calls TEXT,
            tool_call_id TEXT,
            tool_name TEXT,
            is_error INTEGER NOT NULL DEFAULT 0,
            payload TEXT,
            payload_api TEXT,
            input_tokens INTEGER,
            output_tokens INTEGER,
            active INTEGER NOT NULL DEFAULT 1,
            meta TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX messages_by_session ON messages(session_id, active, position)",
        """
        CREATE TABLE requests (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            purpose TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_5m_tokens INTEGER NOT NULL,
            cache_write_1h_tokens INTEGER NOT NULL,
            estimated_cost REAL NOT NULL,
            uncached_cost REAL NOT NULL,
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX requests_by_session ON requests(session_id)",
        """
        CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, content='messages', content_rowid='id', tokenize='unicode61'
        )
        """,
        """
        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
        END
        """,
        """
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END
        """,
    ],
    [
        # The memory a session reads and writes: "owner", "user:<platform>:<id>" or "chat:<platform>:<id>".
        "ALTER TABLE sessions ADD COLUMN memory_scope TEXT NOT NULL DEFAULT 'owner'",
        # The compressor's state, here so a restart or a second process sees it.
        "ALTER TABLE sessions ADD COLUMN compress_failures INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN compress_retry_at REAL",
        # Per-session locks that hold across processes (agent.locks.SqliteSessionLocks).
        """
        CREATE TABLE leases (
            key TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL
        )
        """,
    ],
    [
        # Background review: the id of the last message a review of the session has covered.
        "ALTER TABLE sessions ADD COLUMN reviewed_through INTEGER NOT NULL DEFAULT 0",
    ],
    [
        # The terminal became a chat of the gateway's router, keyed like every chat: platform:dm:chat.
        "UPDATE sessions SET session_key = 'cli:dm:local' WHERE session_key = 'cli:local'",
    ],
    [
        # Images and documents sent with messages: each file once, by content hash (agent.media).
        """
        CREATE TABLE media (
            sha256 TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            size INTEGER NOT NULL,
            data BLOB NOT NULL,
            created_at REAL NOT NULL
        )
        """,
        # The files a message carries: a JSON list of agent.media.types.Media.ref(); NULL for none.
        "ALTER TABLE messages ADD COLUMN media TEXT",
    ],
]

COMPONENT = "agent"
SCHEMA_VERSION = len(MIGRATIONS)


def adopt_legacy_version(conn: sqlite3.Connection) -> None:
    """Databases from before ``schema_versions`` recorded the agent's version in ``user_version``."""
    legacy = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if legacy == 0:
        return
    with immediate(conn):
        conn.execute(SCHEMA_VERSIONS_TABLE)
        conn.execute(
            "INSERT OR IGNORE INTO schema_versions (component, version) VALUES (?, ?)", (COMPONENT, legacy)
        )
        conn.execute("PRAGMA user_version = 0")
