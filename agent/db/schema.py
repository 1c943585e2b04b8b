"""Every table Herald keeps, once, for SQLite and PostgreSQL (SQLAlchemy Core).

This is the schema the repositories query; the Alembic migrations in ``agent/db/migrations``
create and change it (a migration states its DDL explicitly: never edit one that was released).
Where the two databases really differ, the difference is here or in a migration, not in product
code: full-text search (an FTS5 table on SQLite, a ``tsvector`` column on PostgreSQL) is created by
the migrations and queried by ``agent.db.search``.

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

# What a request used and cost, the columns every total adds up (a request's, a day's in usage_days).
SUMMED = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "estimated_cost",
    "uncached_cost",
    "characters",
)

# What a session used and cost, added up as its requests are recorded (agent.store.usage).
SESSION_TOTALS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "estimated_cost",
    "uncached_cost",
)

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
    # The latest first, with what every total adds up (herald insights, the console's all time) read from
    # the index alone: a session's row is mostly its prompt and tools, which SQLite's row keeps before its
    # totals (0021). Free to keep: every request changes updated_at, so the entry is rewritten anyway.
    sa.Index("sessions_by_update", "updated_at", "session_key", *SESSION_TOTALS),
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
    sa.Column("media", sa.Text),  # JSON list of agent.model.media.Media.ref(); NULL for none
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
    sa.Column("characters", sa.Integer, nullable=False, server_default="0"),  # text spoken (speech requests)
    sa.Column("batch", Flag, nullable=False, server_default="0"),  # sent through the batch API: half price
    sa.Index("requests_by_session", "session_id"),
    sa.Index("requests_by_time", "created_at"),  # spend per day (the console), read without a full scan
    # herald insights: every request summed per purpose from this index alone, in its order (0021). Batch
    # first: a lookup by purpose (every turn of the home), or a day's requests grouped by purpose, would
    # find the index by purpose alone and read the history through it.
    sa.Index("requests_by_purpose", "batch", "purpose", *SUMMED),
    sqlite_autoincrement=True,
)

batch_requests = sa.Table(  # agent.store.batches: requests waiting in a provider's batch, across restarts
    "batch_requests",
    metadata,
    sa.Column("custom_id", sa.Text, primary_key=True),  # the request's id inside its batch
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("purpose", sa.Text, nullable=False),
    sa.Column("provider", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("digest", sa.Text, nullable=False),  # sha256 of the request body: the same request finds it
    sa.Column("run", sa.Text),  # what it was sent for (cron:JOB:OCCURRENCE), when that outlives a process
    sa.Column("batch_id", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),  # agent.store.batches.BatchState
    sa.Column("response", sa.Text),  # the answer as JSON, once the batch ended
    sa.Column("submitted_at", Timestamp, nullable=False),
    sa.Column("deadline_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Index("batch_requests_by_request", "session_id", "digest"),
    sa.Index("batch_requests_by_run", "run"),
)

usage_days = sa.Table(  # agent.store.retention: requests past storage.retention.usage_days, added up per day
    "usage_days",
    metadata,
    sa.Column("day", sa.Text, primary_key=True),  # the UTC day the requests were made: 2026-03-14
    sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id"), primary_key=True),
    sa.Column("purpose", sa.Text, primary_key=True),
    sa.Column("provider", sa.Text, primary_key=True),
    sa.Column("model", sa.Text, primary_key=True),
    sa.Column("requests", sa.BigInteger, nullable=False),  # how many ``requests`` rows were added in
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_5m_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_1h_tokens", sa.BigInteger, nullable=False),
    sa.Column("estimated_cost", sa.Double, nullable=False),
    sa.Column("uncached_cost", sa.Double, nullable=False),
    sa.Column("characters", sa.BigInteger, nullable=False),
    sa.Index("usage_days_by_session", "session_id"),
    sa.Index("usage_days_by_purpose", "purpose", *SUMMED, "requests"),  # as requests_by_purpose (0021)
)

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
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

spend_windows = sa.Table(  # agent.store.spending: what each scope spent in each window (day, month, run)
    "spend_windows",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),  # bot, chat:SESSION_KEY, person:PLATFORM:ID, cron:JOB
    sa.Column("period", sa.Text, primary_key=True),  # day:2026-03-14, month:2026-03, run:OCCURRENCE
    sa.Column("spent", sa.Double, nullable=False, server_default="0"),  # USD
    sa.Column("requests", sa.Integer, nullable=False, server_default="0"),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Index("spend_windows_by_period", "period", "scope"),
)

spend_notices = sa.Table(  # who was told about a scope's window once (warned admins, a refused chat)
    "spend_notices",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("period", sa.Text, primary_key=True),
    sa.Column("audience", sa.Text, primary_key=True),  # "admins", or the session key of a chat told
    sa.Column("created_at", Timestamp, nullable=False),
)

tool_audit = sa.Table(  # agent.store.audit: every run of the owner's tools, and every approval
    "tool_audit",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),  # the command, or what a file tool did ("write notes.md")
    sa.Column("outcome", sa.Text, nullable=False),  # agent.store.audit.Outcome
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("exit_code", sa.Integer),
    sa.Column("person", sa.Text),  # who the turn acted for (platform:user_id)
    sa.Column("decided_by", sa.Text),  # who approved or denied (platform:user_id)
    sa.Column("code", sa.Text),  # the approval's code
    sa.Column("runner", sa.Text),  # where a command ran: local, bubblewrap, docker
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp),
    sa.Index("tool_audit_by_time", "created_at"),
    sa.Index("tool_audit_by_chat", "session_key", "created_at"),
    sqlite_autoincrement=True,
)
