"""Spend limits: what each scope (the bot, a chat, a person, a scheduled job) spent per window, and who
was told about a window at or near its limit.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spend_windows",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("period", sa.Text, primary_key=True),
        sa.Column("spent", sa.Double, nullable=False, server_default="0"),
        sa.Column("requests", sa.Integer, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("spend_windows_by_period", "spend_windows", ["period", "scope"])
    op.create_table(
        "spend_notices",
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("period", sa.Text, primary_key=True),
        sa.Column("audience", sa.Text, primary_key=True),
        sa.Column("created_at", sa.Double, nullable=False),
    )
