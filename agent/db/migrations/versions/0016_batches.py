"""Half price for work that can wait: requests sent through a provider's batch API (``batch_requests``,
kept so a restart goes on waiting for them), the batch mark on ``requests``, and a job's batch settings
and the mark of its claimed run (``cron_jobs``).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

FLAG = sa.Boolean(create_constraint=False)


def upgrade() -> None:
    op.create_table(
        "batch_requests",
        sa.Column("custom_id", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("purpose", sa.Text, nullable=False),
        sa.Column("provider", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("run", sa.Text),
        sa.Column("batch_id", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("response", sa.Text),
        sa.Column("submitted_at", sa.Double, nullable=False),
        sa.Column("deadline_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("batch_requests_by_request", "batch_requests", ["session_id", "digest"])
    op.create_index("batch_requests_by_run", "batch_requests", ["run"])
    op.add_column("requests", sa.Column("batch", FLAG, nullable=False, server_default="0"))
    op.add_column("cron_jobs", sa.Column("batch", FLAG, nullable=False, server_default="0"))
    op.add_column("cron_jobs", sa.Column("batch_deadline", sa.Double))
    op.add_column("cron_jobs", sa.Column("occurrence", sa.Text))
