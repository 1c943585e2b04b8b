"""Fencing tokens: the newest lease token each session key has been written under.

A process that held a session's lease and lost it (it was paused past the lease's expiry, then woke
up) still believes it holds it; every write it makes carries its token, and the store refuses a token
older than the newest one recorded here (``agent.db.fence``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_fences",
        sa.Column("session_key", sa.Text, primary_key=True),
        sa.Column("token", sa.BigInteger, nullable=False),
    )
