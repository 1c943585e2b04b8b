"""The gateway's tables in ``state.db`` and their migrations (component "gateway").

They live in the same file as the agent's sessions so that "this message was answered" and "this
reply is queued" can be written in one transaction. Add a migration to change them; never edit one.
"""

from __future__ import annotations

COMPONENT = "gateway"

MIGRATIONS: list[list[str]] = [
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
