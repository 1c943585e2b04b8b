"""Alembic's entry point: migrations run on the connection Herald hands over (never one of its own).

``agent.db.migrate`` calls ``alembic.command.upgrade`` with ``config.attributes["connection"]``
already inside a transaction (``BEGIN IMMEDIATE`` on SQLite, an advisory-locked transaction on
PostgreSQL), so concurrent starts of several processes migrate once.
"""

from __future__ import annotations

from alembic import context

from agent.db.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite changes tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
