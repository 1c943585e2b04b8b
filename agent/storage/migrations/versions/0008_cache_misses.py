"""Cache-miss reports: what recent requests left in the provider's cache, and the misses found.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "cache_prefixes",  # one row per recent request: the cache entries it left, where its history ended
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("sent_at", sa.Double, nullable=False),
        sa.Column("entries", sa.Text, nullable=False),
        sa.Column("anchor", sa.Text),
        sqlite_autoincrement=True,
    )
    op.create_index("cache_prefixes_by_chat", "cache_prefixes", ["session_key", "id"])
    op.create_table(
        "cache_misses",  # one row per cache-miss event
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("request_id", BigId),
        sa.Column("purpose", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("expected_tokens", sa.Integer, nullable=False),
        sa.Column("read_tokens", sa.Integer, nullable=False),
        sa.Column("missed_tokens", sa.Integer, nullable=False),
        sa.Column("missed_usd", sa.Double, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("cache_misses_by_session", "cache_misses", ["session_id", "created_at"])
    op.create_index("cache_misses_by_chat", "cache_misses", ["session_key", "created_at"])
    op.create_index("cache_misses_by_time", "cache_misses", ["created_at"])
