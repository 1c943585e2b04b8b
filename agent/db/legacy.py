"""The migration runner of releases before Alembic, frozen: it brings an old ``state.db`` to the baseline.

Releases up to a013be2 kept a ``schema_versions`` table (component "agent" and "gateway", each a count
of the statement lists below that were applied; the oldest kept the agent's count in
``PRAGMA user_version``). :func:`adopt` applies what such a file still misses, records the Alembic
revision its tables now match, and drops ``schema_versions``; from then on Alembic migrates it. These
lists are history: never change them.
"""

from __future__ import annotations

import sqlalchemy as sa

from agent.db.errors import SchemaTooNew

AGENT: list[list[str]] = [
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
        # Per-session locks that hold across processes (agent.locks).
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
        # The files a message carries: a JSON list of agent.model.media.Media.ref(); NULL for none.
        "ALTER TABLE messages ADD COLUMN media TEXT",
    ],
]

GATEWAY: list[list[str]] = [
    [
        # Every addressed message from an authorized person, stored before the platform is told it
        # arrived. UNIQUE makes a platform's redelivery a no-op.
        """
        CREATE TABLE inbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            platform TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            session_key TEXT NOT NULL,
            message TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending',
            stream_message_id TEXT,
            received_at REAL NOT NULL,
            finished_at REAL,
            UNIQUE (platform, chat_id, message_id)
        )
        """,
        "CREATE INDEX inbox_pending ON inbox(id) WHERE state = 'pending'",
        # Replies, recorded before they are sent and marked sent (with the platform's id) after.
        """
        CREATE TABLE outbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            inbox_id INTEGER REFERENCES inbox(id),
            platform TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            thread_id TEXT,
            reply_to TEXT,
            operation TEXT NOT NULL,
            target_message_id TEXT,
            text TEXT NOT NULL,
            entities TEXT NOT NULL DEFAULT '[]',
            state TEXT NOT NULL DEFAULT 'pending',
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            platform_message_id TEXT,
            error TEXT,
            created_at REAL NOT NULL,
            sent_at REAL
        )
        """,
        "CREATE INDEX outbox_pending ON outbox(next_attempt_at) WHERE state = 'pending'",
        # DM pairing: one-time codes and the people an admin approved.
        """
        CREATE TABLE pairing_codes (
            code TEXT PRIMARY KEY,
            platform TEXT NOT NULL,
            user_id TEXT NOT NULL,
            user_name TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        )
        """,
        """
        CREATE TABLE approved_users (
            platform TEXT NOT NULL,
            user_id TEXT NOT NULL,
            user_name TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            approved_at REAL NOT NULL,
            approved_by TEXT NOT NULL,
            PRIMARY KEY (platform, user_id)
        )
        """,
        # Per-chat choices that outlive sessions (the model for the chat's next session).
        """
        CREATE TABLE chat_settings (
            session_key TEXT PRIMARY KEY,
            provider TEXT,
            model TEXT
        )
        """,
        # Small facts the gateway remembers between runs (e.g. the hash of the published command menu).
        "CREATE TABLE gateway_state (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ],
    [
        # Scheduled tasks (gateway.cron). The table is the truth: the scheduler follows it, and
        # `herald cron` changes it from another process. `version` changes with every change made by
        # someone (create, pause, resume, run now), never with the bookkeeping of a run, so the
        # scheduler re-reads exactly the jobs someone changed.
        """
        CREATE TABLE cron_jobs (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            prompt TEXT NOT NULL,
            schedule TEXT NOT NULL,
            platform TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            thread_id TEXT,
            origin_key TEXT NOT NULL,
            memory_scope TEXT NOT NULL,
            enabled INTEGER NOT NULL DEFAULT 1,
            repeat INTEGER,
            next_run_at REAL,
            last_run_at REAL,
            last_status TEXT,
            last_output TEXT,
            last_error TEXT,
            last_delivery TEXT NOT NULL DEFAULT '[]',
            session_id TEXT,
            version INTEGER NOT NULL DEFAULT 1,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
        "CREATE INDEX cron_jobs_by_target ON cron_jobs(platform, chat_id)",
    ],
    [
        # The replies to one message (a terminal waiting for its answer, a restart's recovery): a
        # lookup by inbox row, not a scan of every reply ever sent.
        "CREATE INDEX outbox_by_inbox ON outbox(inbox_id)",
    ],
]

# What the tables match once the lists are applied: (agent, gateway) versions -> Alembic revision.
REVISIONS = {(4, 3): "0001", (5, 3): "0002"}


def is_legacy(conn: sa.Connection) -> bool:
    """A SQLite file written before Alembic: it has tables but no ``alembic_version``."""
    tables = set(sa.inspect(conn).get_table_names())
    if "alembic_version" in tables:
        return False
    user_version = int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)
    return "schema_versions" in tables or user_version > 0


def adopt(conn: sa.Connection) -> str:
    """Bring a legacy file to a baseline the migrations know; returns the Alembic revision it matches.

    Runs inside the caller's write transaction, so a crash half-way leaves the file as it was.
    """
    versions = _versions(conn)
    agent, gateway = versions.get("agent", 0), versions.get("gateway", 0)
    if agent > len(AGENT) or gateway > len(GATEWAY):
        raise SchemaTooNew(
            f"state.db has schema versions agent {agent} / gateway {gateway}, newer than this Herald "
            "knows. Upgrade Herald or point HERALD_HOME at another directory."
        )
    target_agent = 5 if agent == 5 else 4  # 5: a development build that already stored media
    for statements in [*AGENT[agent:target_agent], *GATEWAY[gateway:3]]:
        for statement in statements:
            conn.exec_driver_sql(statement)
    conn.exec_driver_sql("DROP TABLE IF EXISTS schema_versions")
    conn.exec_driver_sql("PRAGMA user_version = 0")
    return REVISIONS[(target_agent, 3)]


def _versions(conn: sa.Connection) -> dict[str, int]:
    tables = set(sa.inspect(conn).get_table_names())
    found: dict[str, int] = {}
    if "schema_versions" in tables:
        rows = conn.exec_driver_sql("SELECT component, version FROM schema_versions").all()
        found = {str(component): int(version) for component, version in rows}
    legacy = int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)
    if legacy and "agent" not in found:  # the oldest files counted the agent's version here
        found["agent"] = legacy
    return found
