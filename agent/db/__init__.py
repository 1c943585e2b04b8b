"""One storage layer for SQLite (the embedded default) and PostgreSQL (a database several processes share).

- :mod:`agent.db.schema`: every table, once (SQLAlchemy Core).
- :mod:`agent.db.base`: the :class:`~agent.db.base.Storage` seam repositories run on;
  :mod:`agent.db.sqlite` and :mod:`agent.db.postgres` implement it.
- :mod:`agent.db.migrate`: Alembic migrations at start-up, and adoption of a ``state.db`` written
  by a release from before Alembic.

Repositories (sessions, inbox, outbox, pairings, jobs ...) are the only code that builds queries; they
hand a function of a SQLAlchemy ``Connection`` to :meth:`Storage.read` / :meth:`Storage.write`. Code
above them never sees a connection.
"""
