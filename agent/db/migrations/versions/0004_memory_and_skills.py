"""Memory and skills in the database: with PostgreSQL they live here instead of in HERALD_HOME's files
(agent.memory.database, agent.skills.database); with SQLite the tables exist but stay empty.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_documents",  # one row per document: MEMORY.md or USER.md of one scope
        sa.Column("scope", sa.Text, primary_key=True),  # owner, user:PLATFORM:ID, chat:PLATFORM:ID
        sa.Column("target", sa.Text, primary_key=True),  # memory (MEMORY.md) or user (USER.md)
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "skill_files",  # one row per file of the skill library, any content
        sa.Column("path", sa.Text, primary_key=True),  # relative POSIX path: devops/deploy/SKILL.md
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
