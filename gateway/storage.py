"""The database a Herald home uses, opened and migrated: ``state.db`` in the home.

Every command that reads or writes state (the gateway, ``herald chat``, ``herald cron``, ``herald
pairing``) opens it here, so where the state lives is decided in one place.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from agent.storage.base import Storage
from agent.storage.connect import open_storage
from agent.storage.urls import parse_storage_url
from gateway.home import HeraldHome


def open_home_storage(home: HeraldHome) -> AbstractAsyncContextManager[Storage]:
    """``async with open_home_storage(home) as storage``: connected and migrated; closed on exit."""
    return open_storage(parse_storage_url(None, home.db_path))
