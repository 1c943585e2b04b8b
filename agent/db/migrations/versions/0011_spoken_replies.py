"""Spoken replies: an outbox item may send a file (a voice note, its bytes once in the media table), and
a speech request records the characters it was billed for.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("media_sha256", sa.Text))  # media.sha256 of the file sent
    op.add_column("outbox", sa.Column("media_meta", sa.Text))  # JSON: a voice note's duration and waveform
    op.add_column("requests", sa.Column("characters", sa.Integer, nullable=False, server_default="0"))
