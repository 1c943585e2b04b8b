"""Discord interactions in the store (they were in the adapter's memory): a deferred slash command can
be answered after a restart, or by another process, while its token is valid.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "discord_interactions",  # every slash command the adapter took, deferred or not
        sa.Column("id", sa.Text, primary_key=True),  # the interaction's id
        sa.Column("application_id", sa.Text, nullable=False),
        sa.Column("token", sa.Text, nullable=False),  # answers it for 15 minutes
        sa.Column("channel_id", sa.Text, nullable=False),
        sa.Column("command", sa.Text, nullable=False),  # its name, for the "not privately" notice
        sa.Column("ephemeral", sa.Boolean(create_constraint=False), nullable=False),
        sa.Column("deferred", sa.Boolean(create_constraint=False), nullable=False),  # Discord took it
        sa.Column("expires_at", sa.Double, nullable=False),  # wall clock, with a margin
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("discord_interactions_by_expiry", "discord_interactions", ["expires_at"])
    op.create_table(
        "discord_interaction_messages",  # every message that answers an interaction, and as what
        sa.Column("message_id", sa.Text, primary_key=True),
        sa.Column(
            "interaction_id",
            sa.Text,
            sa.ForeignKey("discord_interactions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("role", sa.Text, nullable=False),  # original | followup | notice
    )
    op.create_index(
        "discord_interaction_messages_by_interaction", "discord_interaction_messages", ["interaction_id"]
    )
