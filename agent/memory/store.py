"""Memory per scope over a backend of documents: the one API the tool, sessions and the CLI use.

:class:`MemoryDocuments` is the seam: it stores each scope's two documents (MEMORY.md and USER.md text)
and gives an atomic read-modify-write of one of them. Everything else — what an edit does, limits,
refusals, the snapshot — is :mod:`agent.memory.entries`, shared by every backend. The backends:

- :class:`agent.memory.files.FileMemoryDocuments`: files under ``HERALD_HOME/memories`` that people
  may edit by hand (the default, with SQLite).
- :class:`agent.memory.database.DatabaseMemoryDocuments`: the ``memory_documents`` table (with
  PostgreSQL, so every gateway process on every machine sees the same memory).

Concurrency: any number of tasks and processes may call these methods at once. Each edit is atomic
against every other edit of the same document (no lost updates), and a reader sees a document as it
was before or after an edit, never half of one. Edits are not retried here: a backend failure raises
(nothing was written) and the caller decides.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from agent.memory.entries import (
    FILE_NAMES,
    Edit,
    MemorySnapshot,
    MemoryTarget,
    add_edit,
    checked_target,
    format_usage,
    parse_entries,
    remove_edit,
    replace_edit,
    scope_parts,
    snapshot_of,
    usage_of,
    whole_text_edit,
)


class MemoryDocuments(ABC):
    """Where the documents of every scope live. ``scope`` is always valid here (the bank checks it)."""

    description: str  # where memory lives, for people: a folder, or "the database (URL)"

    @abstractmethod
    def where(self, scope: str, target: MemoryTarget) -> str:
        """One document's name in messages for people: a file path, or "USER.md of scope ..."."""

    @abstractmethod
    async def read(self, scope: str, target: MemoryTarget) -> str | None:
        """The document's text exactly as stored (None when there is none); MemoryToolError when it
        cannot be read as text (a hand-edited file that is not UTF-8), so an edit never destroys it."""

    @abstractmethod
    async def read_for_prompt(self, scope: str) -> dict[MemoryTarget, str | None]:
        """Both documents for a snapshot, never failing on their encoding (bad bytes become U+FFFD
        with a logged warning)."""

    @abstractmethod
    async def update(self, scope: str, target: MemoryTarget, edit: Edit) -> str | None:
        """Atomically: read the current text ("" when there is none), call ``edit`` on it, and store
        what it returns (None: store nothing). Returns what ``edit`` returned.

        ``edit`` is pure and quick: it runs while the document is locked against other edits, and may
        raise to refuse (then nothing is written and the exception propagates)."""

    @abstractmethod
    async def scopes(self) -> list[str]:
        """Every scope with a non-empty document, sorted."""

    @abstractmethod
    async def forget(self, scope: str) -> bool:
        """Delete both documents of ``scope`` (never the owner's); whether there was anything."""


class MemoryStore:
    """MEMORY.md and USER.md of one scope, each with its own character limit."""

    def __init__(self, documents: MemoryDocuments, scope: str, limits: Mapping[MemoryTarget, int]) -> None:
        self.documents = documents
        self.scope = scope
        self._limits = dict(limits)

    def limit(self, target: MemoryTarget) -> int:
        return self._limits[checked_target(target)]

    def where(self, target: MemoryTarget) -> str:
        return self.documents.where(self.scope, checked_target(target))

    async def read(self, target: MemoryTarget) -> str:
        """The document's current text; "" when there is none yet."""
        return await self.documents.read(self.scope, checked_target(target)) or ""

    async def entries(self, target: MemoryTarget) -> list[str]:
        return parse_entries(await self.read(target))

    async def usage(self, target: MemoryTarget) -> str:
        return usage_of(await self.read(target), self.limit(target))

    async def add(self, target: MemoryTarget, content: str) -> str:
        """Append an entry; rejects empty text, exact duplicates and anything over the limit."""
        target = checked_target(target)
        text = await self._update(target, add_edit(target, self.limit(target), content))
        return f"Added to {FILE_NAMES[target]} {self._usage(target, text)}"

    async def replace(self, target: MemoryTarget, old_text: str, new_content: str) -> str:
        """Replace the one entry containing ``old_text`` with ``new_content``."""
        target = checked_target(target)
        text = await self._update(target, replace_edit(target, self.limit(target), old_text, new_content))
        return f"Replaced an entry in {FILE_NAMES[target]} {self._usage(target, text)}"

    async def remove(self, target: MemoryTarget, old_text: str) -> str:
        """Remove the one entry containing ``old_text``."""
        target = checked_target(target)
        text = await self._update(target, remove_edit(target, self.limit(target), old_text))
        return f"Removed an entry from {FILE_NAMES[target]} {self._usage(target, text)}"

    async def save_text(self, target: MemoryTarget, text: str, *, expected: str) -> str | None:
        """Replace the whole document with a person's edit of it (``entries.whole_text_edit``: refused
        when invalid, over the limit, or changed since ``expected`` was read). Returns what was done, or
        None when the edit changed no entry (nothing was written)."""
        target = checked_target(target)
        saved = await self._update(
            target, whole_text_edit(target, self.limit(target), text, expected=expected)
        )
        return None if saved is None else f"Saved {FILE_NAMES[target]} {self._usage(target, saved)}"

    async def snapshot(self) -> MemorySnapshot:
        """The frozen memory text for a new session's prompt, and warnings (``entries.snapshot_of``)."""
        texts = await self.documents.read_for_prompt(self.scope)
        return snapshot_of(texts, self._limits, self.where)

    async def _update(self, target: MemoryTarget, edit: Edit) -> str | None:
        return await self.documents.update(self.scope, target, edit)

    def _usage(self, target: MemoryTarget, text: str | None) -> str:
        return format_usage(len(text or ""), self.limit(target))


class MemoryBank:
    """Every scope's memory in one backend, with the configured limits."""

    def __init__(self, documents: MemoryDocuments, memory_char_limit: int, user_char_limit: int) -> None:
        for label, limit in (("memory_char_limit", memory_char_limit), ("user_char_limit", user_char_limit)):
            if limit <= 0:
                raise ValueError(f"{label} must be a positive number of characters, got {limit}")
        self.documents = documents
        self.limits: dict[MemoryTarget, int] = {"memory": memory_char_limit, "user": user_char_limit}

    @property
    def description(self) -> str:
        return self.documents.description

    def store(self, scope: str) -> MemoryStore:
        """The memory of ``scope``; raises ValueError for a malformed scope."""
        scope_parts(scope)
        return MemoryStore(self.documents, scope, self.limits)

    async def scopes(self) -> list[str]:
        """Every scope that has memory, sorted."""
        return await self.documents.scopes()

    async def forget(self, scope: str) -> bool:
        """Delete a person's or a group's memory (``herald sessions delete``); the owner's is refused
        (ValueError): it is edited, never forgotten wholesale."""
        if scope_parts(scope) is None:
            raise ValueError(
                "the owner's memory is not forgotten with a chat; edit it with herald memory edit"
            )
        return await self.documents.forget(scope)
