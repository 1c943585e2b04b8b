"""The OpenAI-compatible API: where each of its conversations stands (the digest of the history its client
saw last), so the next request of that history continues the same session and its cached prompt.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_conversations",
        sa.Column("session_key", sa.Text, primary_key=True),
        sa.Column("person", sa.Text, nullable=False),
        sa.Column("conversation", sa.Text),
        sa.Column("tip", sa.Text),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("api_conversations_by_tip", "api_conversations", ["person", "tip"])
