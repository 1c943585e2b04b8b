"""The index the outbox sender finds each chat's oldest waiting reply through: pending items only, by
platform, chat and id. Without it the sender's frequent questions (which chats have a reply waiting,
when the next one is due, how many wait in this chat) were answered by walking every reply a platform
ever got, a read that grew with the home's history.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

PENDING = sa.text("state = 'pending'")


def upgrade() -> None:
    op.create_index(
        "outbox_pending_by_chat",
        "outbox",
        ["platform", "chat_id", "id"],
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
