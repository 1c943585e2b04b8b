"""Alembic migrations of Herald's schema (run at start-up by ``agent.storage.migrate``)."""
