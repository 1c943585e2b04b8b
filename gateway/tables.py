"""The gateway's own tables: its inbox and outbox, pairings, per-chat settings, scheduled jobs, the
facts it remembers between runs, Discord's interaction records and the console's login links.

Declared on the agent's shared :data:`agent.db.metadata`, so one schema (and one Alembic history,
``agent/db/migrations``) serves the whole process; the agent itself never reads these. Importing this
module registers them: ``gateway.home.database`` does, so every gateway path that opens the database
sees them (``herald storage migrate`` copies and verifies them with the rest).
"""

from __future__ import annotations

import sqlalchemy as sa

from agent.db import BigId, Flag, Timestamp, metadata

inbox = sa.Table(
    "inbox",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("platform", sa.Text, nullable=False),
    sa.Column("chat_id", sa.Text, nullable=False),
    sa.Column("message_id", sa.Text, nullable=False),
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="pending"),
    sa.Column("stream_message_id", sa.Text),
    sa.Column("received_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp),
    sa.UniqueConstraint("platform", "chat_id", "message_id"),
    sa.Index(
        "inbox_pending",
        "id",
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    ),
    sqlite_autoincrement=True,
)

outbox = sa.Table(
    "outbox",
    metadata,
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
    sa.Column("next_attempt_at", Timestamp, nullable=False),
    sa.Column("platform_message_id", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("sent_at", Timestamp),
    sa.Column("claimed_by", sa.Text),  # the process sending it now (several gateway processes)
    sa.Column("claimed_until", Timestamp),
    # A file the item sends (a spoken reply's voice note): its bytes live once in the media table.
    sa.Column("media_sha256", sa.Text),
    sa.Column("media_meta", sa.Text),  # JSON: what the platform is told about it (a voice note's duration...)
    sa.Index(
        "outbox_pending",
        "next_attempt_at",
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    ),
    sa.Index("outbox_by_inbox", "inbox_id"),
    sqlite_autoincrement=True,
)

pairing_codes = sa.Table(
    "pairing_codes",
    metadata,
    sa.Column("code", sa.Text, primary_key=True),
    sa.Column("platform", sa.Text, nullable=False),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("user_name", sa.Text, nullable=False),
    sa.Column("chat_id", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
)

approved_users = sa.Table(
    "approved_users",
    metadata,
    sa.Column("platform", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("user_name", sa.Text, nullable=False),
    sa.Column("chat_id", sa.Text, nullable=False),
    sa.Column("approved_at", Timestamp, nullable=False),
    sa.Column("approved_by", sa.Text, nullable=False),
)

chat_settings = sa.Table(
    "chat_settings",
    metadata,
    sa.Column("session_key", sa.Text, primary_key=True),
    sa.Column("provider", sa.Text),
    sa.Column("model", sa.Text),
)

gateway_state = sa.Table(
    "gateway_state",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

cron_jobs = sa.Table(
    "cron_jobs",
    metadata,
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
    sa.Column("next_run_at", Timestamp),
    sa.Column("last_run_at", Timestamp),
    sa.Column("last_status", sa.Text),
    sa.Column("last_output", sa.Text),
    sa.Column("last_error", sa.Text),
    sa.Column("last_delivery", sa.Text, nullable=False, server_default="[]"),
    sa.Column("session_id", sa.Text),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("created_by", sa.Text),  # platform:user_id; null: the command line, the terminal, older jobs
    sa.Column("creator", sa.Text),  # where they made it, as JSON (gateway.access.auth.Speaker)
    sa.Index("cron_jobs_by_target", "platform", "chat_id"),
    sa.Index("cron_jobs_by_creator", "created_by"),
)

discord_interactions = sa.Table(
    "discord_interactions",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("application_id", sa.Text, nullable=False),
    sa.Column("token", sa.Text, nullable=False),
    sa.Column("channel_id", sa.Text, nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("ephemeral", Flag, nullable=False),
    sa.Column("deferred", Flag, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("discord_interactions_by_expiry", "expires_at"),
)

discord_interaction_messages = sa.Table(
    "discord_interaction_messages",
    metadata,
    sa.Column("message_id", sa.Text, primary_key=True),
    sa.Column(
        "interaction_id",
        sa.Text,
        sa.ForeignKey("discord_interactions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("role", sa.Text, nullable=False),
    sa.Index("discord_interaction_messages_by_interaction", "interaction_id"),
)

console_links = sa.Table(  # gateway.console.links: one-time login links for the operator console
    "console_links",
    metadata,
    sa.Column("token_hash", sa.Text, primary_key=True),  # SHA-256 of the link's secret, never the secret
    sa.Column("created_by", sa.Text, nullable=False),  # the admin who asked for it (platform:user_id)
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
)
