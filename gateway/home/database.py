"""Where a Herald home's state lives, decided in one place: ``storage.url`` (``$NAME`` read from the
environment) or, when it is null, ``state.db`` in the home.

Every command that reads or writes state (the gateway, ``herald chat``, ``herald cron``, ``herald
pairing``, ``herald memory`` ...) opens it through :func:`open_home_storage`, connected and migrated.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager

from agent.db import BadStorageUrl, Storage, StorageUrl, open_storage, parse_storage_url
from gateway import tables as gateway_tables
from gateway.config import ConfigError, HeraldConfig, load_config
from gateway.home import HeraldHome, from_environment

GATEWAY_TABLES = gateway_tables  # imported for its tables: they join the schema every opened database has


def home_config(home: HeraldHome) -> HeraldConfig:
    """The configuration of ``home``: ``config.yaml``, or for a bot's home (``herald --bot NAME``) that
    bot's settings merged over it."""
    config = load_config(home.config_path)
    return config if home.bot is None else config.bot(home.bot)


def storage_url(
    config: HeraldConfig, home: HeraldHome, environ: Mapping[str, str] | None = None
) -> StorageUrl:
    """``storage.url`` resolved and parsed; a bad one is a ConfigError that says what is accepted."""
    raw = config.storage.url
    if raw is not None:
        raw = from_environment(raw, "storage.url", home, environ)
    try:
        return parse_storage_url(raw, home.db_path)
    except BadStorageUrl as error:
        raise ConfigError(str(error)) from None


def open_home_storage(
    home: HeraldHome,
    config: HeraldConfig | None = None,
    *,
    pool_size: int | None = None,
    read_only: bool = False,
) -> AbstractAsyncContextManager[Storage]:
    """``async with open_home_storage(home) as storage``: connected and migrated; closed on exit.

    ``config`` defaults to the home's ``config.yaml``; ``pool_size`` to ``storage.pool_size`` (a
    command-line tool needs only a couple of connections). ``read_only``: for a command that only reads
    (a report, a listing): ``state.db`` is opened read-only, so it works on a read-only home and writes
    nothing (``agent.db.connect.open_storage``)."""
    config = config if config is not None else home_config(home)
    settings = config.storage
    return open_storage(
        storage_url(config, home),
        pool_size=pool_size or settings.pool_size,
        connect_timeout=settings.connect_timeout,
        read_only=read_only,
    )
