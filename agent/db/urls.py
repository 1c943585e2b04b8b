"""``storage.url``: where the state lives, parsed once, with a form that is safe to print."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


class BadStorageUrl(ValueError):
    """``storage.url`` is not a URL Herald can use; the message says what is accepted."""


@dataclass(frozen=True)
class StorageUrl:
    dialect: str  # "sqlite" | "postgresql"
    sqlalchemy: str  # the URL with Herald's driver, for SQLAlchemy (may hold a password)
    redacted: str  # for logs, doctor and errors: the password replaced by ***
    path: Path | None = None  # the SQLite file


def parse_storage_url(url: str | None, default_sqlite: Path) -> StorageUrl:
    """``None`` (or ``sqlite:///PATH``) is a SQLite file; ``postgresql://user:pass@host:port/db`` is
    PostgreSQL through asyncpg. Anything else raises :class:`BadStorageUrl`."""
    if url is None:
        return StorageUrl("sqlite", f"sqlite:///{default_sqlite}", str(default_sqlite), default_sqlite)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise BadStorageUrl(
            f"storage.url {url!r} is not a URL; use postgresql://USER:PASSWORD@HOST:PORT/DATABASE or "
            "leave it null for state.db in the Herald home"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database:
            raise BadStorageUrl(
                "storage.url sqlite:/// needs a file path (sqlite:////var/lib/herald/state.db)"
            )
        path = Path(parsed.database).expanduser()
        return StorageUrl("sqlite", f"sqlite:///{path}", str(path), path)
    if backend in ("postgresql", "postgres"):
        driver = parsed.set(drivername="postgresql+asyncpg")
        return StorageUrl(
            "postgresql",
            driver.render_as_string(hide_password=False),
            parsed.set(drivername="postgresql").render_as_string(hide_password=True),
        )
    raise BadStorageUrl(
        f"storage.url uses {backend!r}; Herald stores its state in SQLite (leave storage.url null) or "
        "PostgreSQL (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"
    )
