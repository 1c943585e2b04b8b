"""The files messages carry (images, documents), each stored once by its SHA-256.

Not a repository of its own: :mod:`agent.store.messages` calls these inside its transactions, so a
message and its files are stored together or not at all. A message keeps its files' references
(``Media.ref()``, a JSON list in ``messages.media``); the bytes live here, once, however many messages
(or retries) carry the same file: storing a file that is already there changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from agent.db.schema import media
from agent.db.sql import insert_or_ignore
from agent.media.budget import MediaLoad
from agent.model.media import Media

log = logging.getLogger(__name__)

_DATA = sa.select(media.c.sha256, media.c.data).where(
    media.c.sha256.in_(sa.bindparam("hashes", expanding=True))
)


def store_files(conn: sa.Connection, files: Iterable[Media], now: float) -> None:
    """Store each file unless a file with its hash is stored already."""
    rows = [
        {
            "sha256": file.sha256,
            "media_type": file.media_type,
            "size": len(file.data),
            "data": file.data,
            "created_at": now,
        }
        for file in files
    ]
    if rows:
        conn.execute(insert_or_ignore(conn.dialect.name, media), rows)


def references(files: Sequence[Media]) -> str | None:
    """What a message stores in ``messages.media`` for ``files``; None for none."""
    return json.dumps([file.ref() for file in files], ensure_ascii=False) if files else None


def load_files(conn: sa.Connection, stored_references: Iterable[str | None]) -> dict[str, bytes]:
    """The bytes of every file named in ``stored_references`` (``messages.media`` values), by SHA-256,
    in one query."""
    wanted = {ref["sha256"] for text in stored_references if text for ref in json.loads(text)}
    if not wanted:
        return {}
    rows = conn.execute(_DATA, {"hashes": sorted(wanted)}).all()
    return {row.sha256: bytes(row.data) for row in rows}


def load_of(stored_references: Iterable[str | None]) -> MediaLoad:
    """What the files named in ``stored_references`` (``messages.media`` values) add to a request."""
    return MediaLoad.of_refs(ref for text in stored_references if text for ref in json.loads(text))


_reported: set[str] = set()  # missing files already logged


def attached(stored: str | None, files: dict[str, bytes]) -> tuple[Media, ...]:
    """The files of one message, from its ``messages.media`` value and the bytes :func:`load_files`
    found. A file whose bytes are missing is left out, logged: its message's stored payload names it,
    and the request says it is gone (``agent.model.wire.hydrate``)."""
    refs: list[dict[str, Any]] = json.loads(stored) if stored else []
    missing = [ref for ref in refs if ref["sha256"] not in files and ref["sha256"] not in _reported]
    for ref in missing:
        _reported.add(ref["sha256"])  # once per process: the message is loaded again on every turn
        log.warning(
            "the stored %s %s (sha256 %s…) is missing",
            ref.get("kind"),
            ref.get("name") or "",
            ref["sha256"][:12],
        )
    return tuple(Media.from_ref(ref, files[ref["sha256"]]) for ref in refs if ref["sha256"] in files)
