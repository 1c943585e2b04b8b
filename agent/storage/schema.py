"""Every table Herald keeps, once, for SQLite and PostgreSQL (SQLAlchemy Core).

This is the schema the repositories query; the Alembic migrations in ``agent/storage/migrations``
create and change it (a migration states its DDL explicitly: never edit one that was released).
Where the two databases really differ, the difference is here or in a migration, not in product
code: full-text search (an FTS5 table on SQLite, a ``tsvector`` column on PostgreSQL) is created by
the migrations and queried by ``agent.storage.search``.

Types are chosen so one definition serves both: timestamps are ``Double`` (seconds since the epoch,
as ``time.time()`` gives them), booleans are ``Boolean`` (0/1 on SQLite, as the tables written by
releases before Alembic hold them), and every text that is sent to a provider (prompt bytes, tool
schemas, wire payloads) is ``Text``, stored exactly as sent.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

Timestamp = sa.Double
Flag = sa.Boolean(create_constraint=False)
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite's rowid alias must be INTEGER

sessions = sa.Table(
    "sessions",
    metadata,
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
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("message_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("estimated_cost", sa.Double, nullable=False, server_default="0"),
    sa.Column("uncached_cost", sa.Double, nullable=False, server_default="0"),
    sa.Column("request_count", sa.Integer, nullable=False, server_default="0"),  # rows in ``requests``
    sa.Column("last_prompt_tokens", sa.Integer),
    sa.Column("todos_json", sa.Text, nullable=False, server_default="[]"),
    sa.Column("memory_scope", sa.Text, nullable=False, server_default="owner"),
    sa.Column("compress_failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("compress_retry_at", Timestamp),
    sa.Column("reviewed_through", BigId, nullable=False, server_default="0"),
    sa.Index("sessions_by_key", "session_key", "updated_at"),
    sa.Index("sessions_by_update", "updated_at"),
)

messages = sa.Table(
    "messages",
    metadata,
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
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("media", sa.Text),  # JSON list of agent.media.types.Media.ref(); NULL for none
    sa.Index("messages_by_session", "session_id", "active", "position"),
    sqlite_autoincrement=True,
)

media = sa.Table(
    "media",
    metadata,
    sa.Column("sha256", sa.Text, primary_key=True),
    sa.Column("media_type", sa.Text, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)

requests = sa.Table(
    "requests",
    metadata,
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
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("requests_by_session", "session_id"),
    sa.Index("requests_by_time", "created_at"),  # spend per day (the console), read without a full scan
    sqlite_autoincrement=True,
)

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
)

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
    sa.Column("creator", sa.Text),  # where they made it, as JSON (gateway.auth.Speaker)
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

memory_documents = sa.Table(  # agent.memory.database: MEMORY.md / USER.md of each scope, with PostgreSQL
    "memory_documents",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),  # owner, user:PLATFORM:ID, chat:PLATFORM:ID
    sa.Column("target", sa.Text, primary_key=True),  # memory (MEMORY.md) or user (USER.md)
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)

skill_files = sa.Table(  # agent.skills.database: the skill library's files, with PostgreSQL
    "skill_files",
    metadata,
    sa.Column("path", sa.Text, primary_key=True),  # library path: devops/deploy/SKILL.md
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)

cache_prefixes = sa.Table(  # agent.store.cache_misses: what each recent request left in the provider's cache
    "cache_prefixes",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("sent_at", Timestamp, nullable=False),
    sa.Column("entries", sa.Text, nullable=False),  # JSON [[digest, tokens, ttl seconds], ...]
    sa.Column("anchor", sa.Text),  # JSON of where it left the session's stored history; NULL: none sent
    sa.Index("cache_prefixes_by_chat", "session_key", "id"),
    sqlite_autoincrement=True,
)

cache_misses = sa.Table(  # agent.store.cache_misses: requests that read less from the cache than they should
    "cache_misses",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("request_id", BigId),  # the requests row of the request that missed
    sa.Column("purpose", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("cause", sa.Text, nullable=False),
    sa.Column("expected_tokens", sa.Integer, nullable=False),
    sa.Column("read_tokens", sa.Integer, nullable=False),
    sa.Column("missed_tokens", sa.Integer, nullable=False),
    sa.Column("missed_usd", sa.Double, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("cache_misses_by_session", "session_id", "created_at"),
    sa.Index("cache_misses_by_chat", "session_key", "created_at"),
    sa.Index("cache_misses_by_time", "created_at"),
    sqlite_autoincrement=True,
)

session_fences = sa.Table(
    "session_fences",
    metadata,
    sa.Column("session_key", sa.Text, primary_key=True),
    sa.Column("token", sa.BigInteger, nullable=False),
)

console_links = sa.Table(  # gateway.console.links: one-time login links for the operator console
    "console_links",
    metadata,
    sa.Column("token_hash", sa.Text, primary_key=True),  # SHA-256 of the link's secret, never the secret
    sa.Column("created_by", sa.Text, nullable=False),  # the admin who asked for it (platform:user_id)
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
)
