"""The operator console: one-time login links (``/console`` in a chat), kept in the database so a link
works on whichever gateway process of a cluster the browser reaches; an index of requests by time, so
the spend of the last days is read without scanning every request ever made; and each session's count
of requests beside its other totals (counted once here for the sessions there are), so listing chats
reads the sessions, not every request.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_links",
        sa.Column("token_hash", sa.Text, primary_key=True),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
    )
    op.create_index("requests_by_time", "requests", ["created_at"])
    op.add_column("sessions", sa.Column("request_count", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE sessions SET request_count = "
        "(SELECT count(*) FROM requests WHERE requests.session_id = sessions.id)"
    )
