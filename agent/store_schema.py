"""SQLite schema of ``state.db`` and its migrations.

Each migration is a list of statements applied in one transaction; ``PRAGMA user_version`` records
the version reached. Add a migration to change the schema; never edit a released one.
"""

from __future__ import annotations

import sqlite3

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
]

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring ``conn`` to ``SCHEMA_VERSION``; returns the version found before migrating."""
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise RuntimeError(
            f"state.db has schema version {found}, newer than this Herald ({SCHEMA_VERSION}). "
            "Upgrade Herald or point HERALD_HOME at another directory."
        )
    for version in range(found, SCHEMA_VERSION):
        with conn:
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
    return found
