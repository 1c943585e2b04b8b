"""Who wrote in each chat (``chat_people``: one row per chat and person, added as the inbox stores their
messages), so the console counts and sorts chats by their people without reading every message ever
received. Filled here from the inbox there is.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_people",
        sa.Column("session_key", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("first_seen", sa.Double, nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        sender = "CAST(message AS JSONB) ->> 'user_id'"
    else:
        sender = "json_extract(message, '$.user_id')"
    op.execute(
        "INSERT INTO chat_people (session_key, user_id, first_seen) "
        f"SELECT session_key, {sender}, min(received_at) FROM inbox "
        f"WHERE {sender} IS NOT NULL GROUP BY session_key, {sender}"
    )
