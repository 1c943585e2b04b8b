"""The index a chat's latest outbox items are found through (the console's "Recent replies" on a chat's
page): by platform, chat and thread, newest last, so the newest are read from its end whatever the
outbox's size. And the chat in the index a delivery status finds its item through (0018's
``outbox_by_message``), since a status names its chat too: with it that index matches more of the
status's update than the chat's index does, so SQLite (which keeps no statistics) looks the message up
instead of reading the chat's items one by one.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("outbox_by_chat", "outbox", ["platform", "chat_id", "thread_id", "id"])
    op.drop_index("outbox_by_message", "outbox")
    op.create_index("outbox_by_message", "outbox", ["platform", "platform_message_id", "chat_id"])
