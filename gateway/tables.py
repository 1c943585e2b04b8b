"""The gateway's own tables: its inbox (and who wrote in each chat) and outbox, pairings, per-chat
settings, scheduled jobs, the facts it remembers between runs, the records adapters keep, the console's
login links and where each conversation of the OpenAI-compatible API stands.

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
    sa.Index("inbox_by_time", "received_at"),  # retention: old rows found without reading them all
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
    sa.Column("buttons", sa.Text, nullable=False, server_default="[]"),  # adapters.base.Button, as JSON
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
    # What the platform last said about the sent message (a status webhook): sent, delivered, read or
    # failed, never an earlier one after a later (gateway.ledger.outbox.DELIVERY_ORDER); and when.
    sa.Column("delivery", sa.Text),
    sa.Column("delivery_at", Timestamp),
    sa.Index(
        "outbox_pending",
        "next_attempt_at",
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    ),
    sa.Index("outbox_by_inbox", "inbox_id"),
    sa.Index("outbox_by_time", "created_at"),  # retention: old rows found without reading them all
    # A status finds its row (its chat too: the status's update matches more of this index than of the next).
    sa.Index("outbox_by_message", "platform", "platform_message_id", "chat_id"),
    sa.Index("outbox_by_chat", "platform", "chat_id", "thread_id", "id"),  # a chat's latest items
    sa.Index(  # each chat's oldest waiting item, for the sender (gateway.ledger.outbox: PENDING)
        "outbox_pending_by_chat",
        "platform",
        "chat_id",
        "id",
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    ),
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
    sa.Column("batch", Flag, nullable=False, server_default="0"),  # runs through the batch API, half price
    sa.Column("batch_deadline", sa.Double),  # seconds a run may wait for its batch; null: the agent's
    sa.Column("occurrence", sa.Text),  # the claimed run's own mark: a restart resumes the run it names
    sa.Index("cron_jobs_by_target", "platform", "chat_id"),
    sa.Index("cron_jobs_by_creator", "created_by"),
)

adapter_records = sa.Table(  # gateway.platforms.records: what adapters keep (adapters.records)
    "adapter_records",
    metadata,
    sa.Column("namespace", sa.Text, primary_key=True),  # the platform whose adapter keeps it
    sa.Column("key", sa.Text, primary_key=True),  # the adapter's own key
    sa.Column("parent", sa.Text),  # the key of the record it belongs to (dropped with it)
    sa.Column("value", sa.Text, nullable=False),  # a JSON object
    sa.Column("expires_at", Timestamp),  # the adapter's deadline; null: none
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("adapter_records_by_parent", "namespace", "parent"),
    sa.Index("adapter_records_by_expiry", "expires_at"),
)

console_links = sa.Table(  # gateway.console.links: one-time login links for the operator console
    "console_links",
    metadata,
    sa.Column("token_hash", sa.Text, primary_key=True),  # SHA-256 of the link's secret, never the secret
    sa.Column("created_by", sa.Text, nullable=False),  # the admin who asked for it (platform:user_id)
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
)
api_conversations = sa.Table(  # gateway.openai_api.conversations: where each API conversation stands
    "api_conversations",
    metadata,
    sa.Column("session_key", sa.Text, primary_key=True),  # one line of a conversation: a session key
    sa.Column("person", sa.Text, nullable=False),  # whom the API key acts for (platform:user_id)
    sa.Column("conversation", sa.Text),  # the client's conversation id, when it sends one
    sa.Column("tip", sa.Text),  # digest of the history the client saw last; null: matches no request
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Index("api_conversations_by_tip", "person", "tip"),
)

chat_people = sa.Table(  # gateway.ledger.inbox: who wrote in each chat (the console's "People")
    "chat_people",
    metadata,
    sa.Column("session_key", sa.Text, primary_key=True),  # the chat (a direct chat, a group or one topic)
    sa.Column("user_id", sa.Text, primary_key=True),  # as the platform names the person
    sa.Column("first_seen", Timestamp, nullable=False),
)

tool_approvals = sa.Table(  # gateway.approvals.records: commands held for the owner's yes, and the answers
    "tool_approvals",
    metadata,
    sa.Column("code", sa.Text, primary_key=True),  # what /approve CODE and the buttons name
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),  # exactly what would run
    sa.Column("findings", sa.Text, nullable=False),  # why it is held, as JSON [{rule, what}]
    sa.Column("platform", sa.Text, nullable=False),  # the chat asked
    sa.Column("chat_id", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text),
    sa.Column("person", sa.Text),  # who the turn acts for (platform:user_id)
    sa.Column("state", sa.Text, nullable=False, server_default="pending"),
    sa.Column("decided_by", sa.Text),  # platform:user_id
    sa.Column("decided_by_name", sa.Text),
    sa.Column("prompt", sa.Text, nullable=False),  # the text of the message with buttons
    sa.Column("prompt_outbox_id", BigId),  # that message's outbox item (edited once decided)
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Column("decided_at", Timestamp),
    sa.Index("tool_approvals_by_chat", "platform", "chat_id", "state"),
    sa.Index("tool_approvals_by_session", "session_id", "state"),
    sa.Index("tool_approvals_by_expiry", "expires_at"),  # retention
)
