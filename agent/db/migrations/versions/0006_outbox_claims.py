"""Outbox claims: with several gateway processes, each reply is sent by the one process that claimed it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("claimed_by", sa.Text))
    op.add_column("outbox", sa.Column("claimed_until", sa.Double))
