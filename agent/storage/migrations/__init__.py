"""Alembic migrations of Herald's schema (run at start-up by ``agent.storage.migrate``)."""

HEAD = "0009"  # the newest revision in versions/: a start at this revision loads no migration code
