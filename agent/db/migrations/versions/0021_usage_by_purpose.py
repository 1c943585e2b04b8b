"""The indexes ``herald insights`` adds every request up per purpose from: ``requests`` by batch and
purpose, ``usage_days`` by purpose, each with the columns it sums. Without them the whole tables were read
and every request sorted by purpose, a read that grew with the home's history; with them each table's
index alone is read, already in purpose order. And ``sessions_by_update`` with each session's key and
totals: the sum over every session (insights, the console's all time) is read from it, not from the
sessions' rows, which are mostly prompt and tools (on SQLite, before the totals in the row).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# As agent.db.schema.SUMMED is now: a released migration states its columns, whatever the schema becomes.
SUMMED = [
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "estimated_cost",
    "uncached_cost",
    "characters",
]


TOTALS = [  # a session's, as agent.db.schema.SESSION_TOTALS is now
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "estimated_cost",
    "uncached_cost",
]


def upgrade() -> None:
    # batch first: see agent.db.schema (a query by purpose alone must not find this index)
    op.create_index("requests_by_purpose", "requests", ["batch", "purpose", *SUMMED])
    op.create_index("usage_days_by_purpose", "usage_days", ["purpose", *SUMMED, "requests"])
    op.drop_index("sessions_by_update", "sessions")
    op.create_index("sessions_by_update", "sessions", ["updated_at", "session_key", *TOTALS])
