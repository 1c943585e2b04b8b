"""Alembic migrations of Herald's schema (run at start-up by ``agent.db.migrate``)."""

HEAD = "0021"  # the newest revision in versions/: a start at this revision loads no migration code
