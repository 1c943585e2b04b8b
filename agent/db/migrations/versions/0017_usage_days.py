"""Retention: requests older than ``storage.retention.usage_days`` are added up per UTC day, session,
purpose, provider and model (``usage_days``), so every total stays exact after their rows are deleted;
and the indexes by age retention finds old inbox, outbox and approval rows through.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_days",
        sa.Column("day", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id"), primary_key=True),
        sa.Column("purpose", sa.Text, primary_key=True),
        sa.Column("provider", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_write_5m_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_write_1h_tokens", sa.BigInteger, nullable=False),
        sa.Column("estimated_cost", sa.Double, nullable=False),
        sa.Column("uncached_cost", sa.Double, nullable=False),
        sa.Column("characters", sa.BigInteger, nullable=False),
    )
    op.create_index("usage_days_by_session", "usage_days", ["session_id"])
    # What retention looks for by age, found through an index rather than by reading every row.
    op.create_index("inbox_by_time", "inbox", ["received_at"])
    op.create_index("outbox_by_time", "outbox", ["created_at"])
    op.create_index("tool_approvals_by_expiry", "tool_approvals", ["expires_at"])
