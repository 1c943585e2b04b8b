"""The schema of the last release before Alembic (agent tables v4, gateway tables v3).

A new database gets it from here; a ``state.db`` written by that release is stamped at this revision
by ``agent.db.migrate`` (its tables already are exactly this) and upgraded from here.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Flag = sa.Boolean(create_constraint=False)
PENDING = sa.text("state = 'pending'")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text),
        sa.Column("user_id", sa.Text),
        sa.Column("title", sa.Text),
        sa.Column("system_prompt", sa.Text, nullable=False),
        sa.Column("tools_json", sa.Text, nullable=False),
        sa.Column("provider", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("message_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_read_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("estimated_cost", sa.Double, nullable=False, server_default="0"),
        sa.Column("uncached_cost", sa.Double, nullable=False, server_default="0"),
        sa.Column("last_prompt_tokens", sa.Integer),
        sa.Column("todos_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("memory_scope", sa.Text, nullable=False, server_default="owner"),
        sa.Column("compress_failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("compress_retry_at", sa.Double),
        sa.Column("reviewed_through", BigId, nullable=False, server_default="0"),
    )
    op.create_index("sessions_by_key", "sessions", ["session_key", "updated_at"])
    op.create_index("sessions_by_update", "sessions", ["updated_at"])
    op.create_table(
        "messages",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("position", sa.Double, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("tool_calls", sa.Text),
        sa.Column("tool_call_id", sa.Text),
        sa.Column("tool_name", sa.Text),
        sa.Column("is_error", Flag, nullable=False, server_default="0"),
        sa.Column("payload", sa.Text),
        sa.Column("payload_api", sa.Text),
        sa.Column("input_tokens", sa.Integer),
        sa.Column("output_tokens", sa.Integer),
        sa.Column("active", Flag, nullable=False, server_default="1"),
        sa.Column("meta", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.Double, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("messages_by_session", "messages", ["session_id", "active", "position"])
    op.create_table(
        "requests",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("purpose", sa.Text, nullable=False),
        sa.Column("provider", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("cache_read_tokens", sa.Integer, nullable=False),
        sa.Column("cache_write_5m_tokens", sa.Integer, nullable=False),
        sa.Column("cache_write_1h_tokens", sa.Integer, nullable=False),
        sa.Column("estimated_cost", sa.Double, nullable=False),
        sa.Column("uncached_cost", sa.Double, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("requests_by_session", "requests", ["session_id"])
    op.create_table(
        "leases",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
    )
    _full_text_search()
    op.create_table(
        "inbox",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("message_id", sa.Text, nullable=False),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False, server_default="pending"),
        sa.Column("stream_message_id", sa.Text),
        sa.Column("received_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double),
        sa.UniqueConstraint("platform", "chat_id", "message_id"),
        sqlite_autoincrement=True,
    )
    op.create_index("inbox_pending", "inbox", ["id"], sqlite_where=PENDING, postgresql_where=PENDING)
    op.create_table(
        "outbox",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("inbox_id", BigId, sa.ForeignKey("inbox.id")),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text),
        sa.Column("reply_to", sa.Text),
        sa.Column("operation", sa.Text, nullable=False),
        sa.Column("target_message_id", sa.Text),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("entities", sa.Text, nullable=False, server_default="[]"),
        sa.Column("state", sa.Text, nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.Double, nullable=False),
        sa.Column("platform_message_id", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("sent_at", sa.Double),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "outbox_pending", "outbox", ["next_attempt_at"], sqlite_where=PENDING, postgresql_where=PENDING
    )
    op.create_index("outbox_by_inbox", "outbox", ["inbox_id"])
    op.create_table(
        "pairing_codes",
        sa.Column("code", sa.Text, primary_key=True),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
    )
    op.create_table(
        "approved_users",
        sa.Column("platform", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("approved_at", sa.Double, nullable=False),
        sa.Column("approved_by", sa.Text, nullable=False),
    )
    op.create_table(
        "chat_settings",
        sa.Column("session_key", sa.Text, primary_key=True),
        sa.Column("provider", sa.Text),
        sa.Column("model", sa.Text),
    )
    op.create_table(
        "gateway_state",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "cron_jobs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("schedule", sa.Text, nullable=False),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text),
        sa.Column("origin_key", sa.Text, nullable=False),
        sa.Column("memory_scope", sa.Text, nullable=False),
        sa.Column("enabled", Flag, nullable=False, server_default="1"),
        sa.Column("repeat", sa.Integer),
        sa.Column("next_run_at", sa.Double),
        sa.Column("last_run_at", sa.Double),
        sa.Column("last_status", sa.Text),
        sa.Column("last_output", sa.Text),
        sa.Column("last_error", sa.Text),
        sa.Column("last_delivery", sa.Text, nullable=False, server_default="[]"),
        sa.Column("session_id", sa.Text),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("cron_jobs_by_target", "cron_jobs", ["platform", "chat_id"])


def _full_text_search() -> None:
    """session_search: an FTS5 table kept by triggers (SQLite), a generated tsvector (PostgreSQL)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE messages_fts USING fts5("
            "content, content='messages', content_rowid='id', tokenize='unicode61')"
        )
        op.execute(
            "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
            "INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END"
        )
        op.execute(
            "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
            "INSERT INTO messages_fts(messages_fts, rowid, content) "
            "VALUES ('delete', old.id, old.content); END"
        )
        return
    op.execute(
        "ALTER TABLE messages ADD COLUMN search tsvector "
        "GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED"
    )
    op.execute("CREATE INDEX messages_search ON messages USING GIN (search)")
