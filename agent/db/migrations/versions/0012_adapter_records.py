"""The records adapters keep, in one table for every platform (``adapter_records``, one namespace per
platform): Discord's slash-command interactions move there from the two tables of revision 0003, kept
as they were (an interaction's facts under ``interaction:ID``, each answering message under
``message:ID`` as its child), so a command deferred before the upgrade is still answered after it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# Revision 0003's tables and the namespace their records take (the platform's name).
INTERACTIONS, MESSAGES, NAMESPACE = "discord_interactions", "discord_interaction_messages", "discord"


def upgrade() -> None:
    records = op.create_table(
        "adapter_records",
        sa.Column("namespace", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("parent", sa.Text),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("expires_at", sa.Double),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("adapter_records_by_parent", "adapter_records", ["namespace", "parent"])
    op.create_index("adapter_records_by_expiry", "adapter_records", ["expires_at"])
    conn = op.get_bind()
    rows = list(_interaction_rows(conn)) + list(_message_rows(conn))
    if rows:
        op.bulk_insert(records, rows)
    op.drop_table(MESSAGES)
    op.drop_table(INTERACTIONS)


def _value(facts: dict[str, object]) -> str:
    return json.dumps(facts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _interaction_rows(conn: sa.Connection) -> list[dict[str, object]]:
    query = sa.text(
        f"SELECT id, application_id, token, channel_id, command, ephemeral, deferred, expires_at, "
        f"created_at FROM {INTERACTIONS}"
    )
    return [
        {
            "namespace": NAMESPACE,
            "key": f"interaction:{row.id}",
            "parent": None,
            "value": _value(
                {
                    "application_id": row.application_id,
                    "token": row.token,
                    "channel_id": row.channel_id,
                    "command": row.command,
                    "ephemeral": bool(row.ephemeral),
                    "deferred": bool(row.deferred),
                }
            ),
            "expires_at": row.expires_at,
            "created_at": row.created_at,
        }
        for row in conn.execute(query)
    ]


def _message_rows(conn: sa.Connection) -> list[dict[str, object]]:
    query = sa.text(
        f"SELECT m.message_id, m.interaction_id, m.role, i.created_at FROM {MESSAGES} m "
        f"JOIN {INTERACTIONS} i ON i.id = m.interaction_id"
    )
    return [
        {
            "namespace": NAMESPACE,
            "key": f"message:{row.message_id}",
            "parent": f"interaction:{row.interaction_id}",
            "value": _value({"interaction": row.interaction_id, "role": row.role}),
            "expires_at": None,
            "created_at": row.created_at,
        }
        for row in conn.execute(query)
    ]
