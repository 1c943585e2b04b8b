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

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.errors import READ_ONLY_HOME, StorageError, StorageUnavailable
from agent.db.fencing import FencedOut, issue_token, newest_token
from agent.db.migrate import head_revision, known_revision
from agent.db.postgres import inspect_server
from agent.db.schema import BigId, Flag, Timestamp, media, metadata, requests, sessions
from agent.db.sql import insert_for, insert_ignoring_duplicates, json_text, serialize, upsert
from agent.db.sqlite import Integrity, check_integrity
from agent.db.transfer import REPLAYED, TableCopy, copy_tables, verify
from agent.db.urls import BadStorageUrl, StorageUrl, parse_storage_url

__all__ = [
    "READ_ONLY_HOME",
    "REPLAYED",
    "BadStorageUrl",
    "BigId",
    "FencedOut",
    "Flag",
    "Integrity",
    "Storage",
    "StorageError",
    "StorageUnavailable",
    "StorageUrl",
    "TableCopy",
    "Timestamp",
    "check_integrity",
    "copy_tables",
    "head_revision",
    "insert_for",
    "insert_ignoring_duplicates",
    "inspect_server",
    "issue_token",
    "json_text",
    "known_revision",
    "media",
    "metadata",
    "newest_token",
    "open_storage",
    "parse_storage_url",
    "requests",
    "serialize",
    "sessions",
    "upsert",
    "verify",
]
