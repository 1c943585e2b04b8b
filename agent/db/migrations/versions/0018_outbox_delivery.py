"""Delivery statuses: what the platform last said about a reply it accepted (sent, delivered, read,
failed) and when, on its outbox row; and the index a status finds that row through by the platform's
message id.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("delivery", sa.Text))
    op.add_column("outbox", sa.Column("delivery_at", sa.Double))
    op.create_index("outbox_by_message", "outbox", ["platform", "platform_message_id"])
