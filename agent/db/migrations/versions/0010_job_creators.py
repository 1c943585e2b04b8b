"""Who made each scheduled job: its runs act with that person's current rights, and revoking the person
pauses the jobs they made.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # platform:user_id; null: the command line, the terminal, or a job made before this revision
    op.add_column("cron_jobs", sa.Column("created_by", sa.Text))
    # where they made it (gateway.access.auth.Speaker)
    op.add_column("cron_jobs", sa.Column("creator", sa.Text))
    op.create_index("cron_jobs_by_creator", "cron_jobs", ["created_by"])
