"""Memory as files under ``HERALD_HOME/memories``, which people may also edit by hand (the default).

The owner's documents are ``memories/MEMORY.md`` and ``memories/USER.md``; another person's are under
``memories/users/<platform>-<id>/`` and a group chat's under ``memories/chats/<platform>-<id>/``
(platform ids become safe file names: nothing can point outside ``memories``).

Atomicity: every edit is a read-modify-write under an exclusive lock on the scope's directory that
holds across processes (``fcntl``), and the new text replaces the file in one step (a crash leaves the
old file or the new one): an edit that raised wrote nothing and may be retried. Reads take no lock (a
reader sees the old file or the new one). The disk work runs in a thread (``asyncio.to_thread``), off
the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path
from urllib.parse import quote, unquote

from agent.files.atomic import atomic_write_text, directory_lock
from agent.files.text import read_text
from agent.memory.entries import (
    FILE_NAMES,
    OWNER_SCOPE,
    SCOPE_KINDS,
    Edit,
    MemoryTarget,
    MemoryToolError,
    scope_parts,
)
from agent.memory.store import MemoryDocuments

log = logging.getLogger(__name__)


def scope_directory(root: Path, scope: str) -> Path:
    """Where ``scope``'s files live under ``root`` (``HERALD_HOME/memories``).

    Platform ids become safe file names (no separators, no "..", nothing outside ``root``); raises
    ValueError for a malformed scope.
    """
    parts = scope_parts(scope)
    if parts is None:
        return root
    return root / f"{parts.kind}s" / f"{_file_name(parts.platform)}-{_file_name(parts.ident)}"


def _file_name(part: str) -> str:
    return quote(part, safe="").replace(".", "%2E").replace("-", "%2D")


def _scope_of(kind: str, directory_name: str) -> str | None:
    """The scope whose directory is ``directory_name`` (the inverse of :func:`scope_directory`)."""
    platform, dash, ident = directory_name.partition("-")
    if not dash or not platform or not ident:
        return None
    return f"{kind}:{unquote(platform)}:{unquote(ident)}"


def _has_text(directory: Path) -> bool:
    for name in FILE_NAMES.values():
        try:
            if (directory / name).stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


class FileMemoryDocuments(MemoryDocuments):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = f"files in {root}"

    def path(self, scope: str, target: MemoryTarget) -> Path:
        return scope_directory(self.root, scope) / FILE_NAMES[target]

    def where(self, scope: str, target: MemoryTarget) -> str:
        return str(self.path(scope, target))

    async def read(self, scope: str, target: MemoryTarget) -> str | None:
        return await asyncio.to_thread(self._read, self.path(scope, target))

    async def read_for_prompt(self, scope: str) -> dict[MemoryTarget, str | None]:
        def read_all() -> dict[MemoryTarget, str | None]:
            texts: dict[MemoryTarget, str | None] = {}
            for target in FILE_NAMES:
                try:
                    texts[target] = read_text(self.path(scope, target))
                except FileNotFoundError:
                    texts[target] = None
            return texts

        return await asyncio.to_thread(read_all)

    async def update(self, scope: str, target: MemoryTarget, edit: Edit) -> str | None:
        def locked() -> str | None:
            path = self.path(scope, target)
            with directory_lock(path.parent):
                new = edit(self._read(path) or "")
                if new is not None:
                    atomic_write_text(path, new)
                return new

        return await asyncio.to_thread(locked)

    async def scopes(self) -> list[str]:
        return await asyncio.to_thread(self._scopes)

    async def forget(self, scope: str) -> bool:
        def remove() -> bool:
            directory = scope_directory(self.root, scope)
            if directory == self.root or not directory.is_dir():
                return False
            shutil.rmtree(directory)
            return True

        return await asyncio.to_thread(remove)

    def _scopes(self) -> list[str]:
        found = [OWNER_SCOPE] if _has_text(self.root) else []
        for kind in SCOPE_KINDS:
            try:
                names = os.listdir(self.root / f"{kind}s")
            except OSError:
                continue
            for name in names:
                scope = _scope_of(kind, name)
                if scope is not None and _has_text(self.root / f"{kind}s" / name):
                    found.append(scope)
        return sorted(found)

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:  # the model reads the error: the file's place is in the log
            log.warning("%s is not UTF-8 text, so the memory tool cannot edit it; fix or delete it", path)
            raise MemoryToolError(
                f"{path.name} is not UTF-8 text, so it cannot be read or edited; the owner can fix it (the "
                "log says where it is)."
            ) from exc
