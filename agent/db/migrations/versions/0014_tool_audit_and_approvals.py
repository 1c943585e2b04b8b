"""The owner's hands: the audit of every command and file operation, the commands held for approval, and
buttons under an outbox message (the approval's Approve / Deny).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tool_audit",  # one row per command, file operation or approval decision
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("person", sa.Text),
        sa.Column("decided_by", sa.Text),
        sa.Column("code", sa.Text),
        sa.Column("runner", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double),
        sqlite_autoincrement=True,
    )
    op.create_index("tool_audit_by_time", "tool_audit", ["created_at"])
    op.create_index("tool_audit_by_chat", "tool_audit", ["session_key", "created_at"])
    op.create_table(
        "tool_approvals",  # one row per command held for the owner's yes
        sa.Column("code", sa.Text, primary_key=True),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("findings", sa.Text, nullable=False),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("chat_id", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text),
        sa.Column("person", sa.Text),
        sa.Column("state", sa.Text, nullable=False, server_default="pending"),
        sa.Column("decided_by", sa.Text),
        sa.Column("decided_by_name", sa.Text),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("prompt_outbox_id", BigId),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.Column("decided_at", sa.Double),
    )
    op.create_index("tool_approvals_by_chat", "tool_approvals", ["platform", "chat_id", "state"])
    op.create_index("tool_approvals_by_session", "tool_approvals", ["session_id", "state"])
    op.add_column("outbox", sa.Column("buttons", sa.Text, nullable=False, server_default="[]"))
