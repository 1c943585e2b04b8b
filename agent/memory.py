"""Curated memory: MEMORY.md (the agent's notes) and USER.md (about the user), per person.

Each file is a short list of entries separated by a line containing only "§". The files are small
and capped so that their snapshot, frozen into a session's volatile layer when the session starts,
stays cheap. Edits are written to disk at once but only show up in the system prompt of the next
session: the running session keeps its bytes (ARCHITECTURE.md, cache invariants 1 and 3).

Nobody's words reach anyone else: memory is kept per *scope* (ARCHITECTURE.md, reliability invariant
5). The owner (the terminal, the gateway's admins) has the files directly under ``memories/``; every
other person has their own pair under ``memories/users/``; a group chat has its own pair under
``memories/chats/``, and the memory tool in a group writes there, never into a member's files. The
gateway decides a session's scope; the session stores it.

Every edit is a read-modify-write under an exclusive lock on the scope's directory that holds across
processes (``fcntl`` file lock). The methods block on disk and on that lock: call them from a thread
(``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from agent.injection import scan_for_injection
from agent.private import make_private_dirs
from agent.text import read_text

MemoryTarget = Literal["memory", "user"]

SEPARATOR = "§"
ENTRY_JOINER = f"\n{SEPARATOR}\n"
TARGETS: tuple[MemoryTarget, ...] = ("memory", "user")
FILE_NAMES: dict[MemoryTarget, str] = {"memory": "MEMORY.md", "user": "USER.md"}
LOCK_FILE = ".lock"

OWNER_SCOPE = "owner"
_SCOPE_KINDS = ("user", "chat")


def user_scope(platform: str, user_id: str) -> str:
    """The scope of one person's private memory on one platform."""
    return f"user:{platform}:{user_id}"


def chat_scope(platform: str, chat_id: str) -> str:
    """The scope of a group chat's shared memory."""
    return f"chat:{platform}:{chat_id}"


def scope_directory(root: Path, scope: str) -> Path:
    """Where ``scope``'s files live under ``root`` (``HERALD_HOME/memories``).

    Platform ids become safe file names (no separators, no "..", nothing outside ``root``).
    """
    if scope == OWNER_SCOPE:
        return root
    kind, _, rest = scope.partition(":")
    platform, _, ident = rest.partition(":")
    if kind not in _SCOPE_KINDS or not platform or not ident:
        raise ValueError(
            f"unknown memory scope {scope!r}: expected owner, user:PLATFORM:ID or chat:PLATFORM:ID"
        )
    return root / f"{kind}s" / f"{_file_name(platform)}-{_file_name(ident)}"


def _file_name(part: str) -> str:
    return quote(part, safe="").replace(".", "%2E").replace("-", "%2D")


class MemoryToolError(Exception):
    """A memory edit was refused; the message tells the model or user what to do instead."""


class MemoryLimitError(MemoryToolError):
    """The edit would push a file over its character limit; nothing was written."""


class MemoryEditError(MemoryToolError):
    """The edit is invalid (empty, duplicate, ambiguous or unmatched text); nothing was written."""


def format_usage(used: int, limit: int) -> str:
    """Usage like "[67% — 1,474/2,200 chars]"; rounded down, so 100% only when truly full."""
    if limit <= 0:
        raise ValueError(f"limit must be a positive number of characters, got {limit}")
    return f"[{used * 100 // limit}% — {used:,}/{limit:,} chars]"


def parse_entries(text: str) -> list[str]:
    """Entries of a memory file: split at lines holding only "§", stripped, empty ones dropped.

    Tolerant of hand edits (CRLF, spaces around "§", a leading or trailing separator).
    """
    entries: list[str] = []
    current: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.strip() == SEPARATOR:
            entries.append("\n".join(current))
            current = []
        else:
            current.append(line)
    entries.append("\n".join(current))
    return [entry.strip() for entry in entries if entry.strip()]


def join_entries(entries: list[str]) -> str:
    """The file text for ``entries``; its length is what the limit applies to."""
    return ENTRY_JOINER.join(entries)


def numbered_entries(entries: list[str]) -> str:
    """Entries as "1) ...", one per line, so the model can quote the one it means."""
    if not entries:
        return "(none)"
    return "\n".join(f"{number}) {entry}" for number, entry in enumerate(entries, start=1))


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` in one step: a crash leaves the old file or the new one, never half of either."""
    make_private_dirs(path.parent)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable where the platform allows it (POSIX); best effort elsewhere."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` shared by every process on this machine (blocks until free)."""
    make_private_dirs(directory)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class MemoryStore:
    """MEMORY.md and USER.md of one scope, in one directory, each with its own character limit."""

    def __init__(self, memories_dir: Path, memory_char_limit: int, user_char_limit: int) -> None:
        for label, limit in (("memory_char_limit", memory_char_limit), ("user_char_limit", user_char_limit)):
            if limit <= 0:
                raise ValueError(f"{label} must be a positive number of characters, got {limit}")
        self._dir = memories_dir
        self._limits: dict[MemoryTarget, int] = {"memory": memory_char_limit, "user": user_char_limit}

    def path(self, target: MemoryTarget) -> Path:
        return self._dir / FILE_NAMES[_checked_target(target)]

    def limit(self, target: MemoryTarget) -> int:
        return self._limits[_checked_target(target)]

    def read(self, target: MemoryTarget) -> str:
        """The file's current text; "" when it does not exist yet."""
        path = self.path(target)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""
        except UnicodeDecodeError as exc:
            raise MemoryToolError(
                f"{path} is not UTF-8 text, so it cannot be edited. Fix or delete the file."
            ) from exc

    def entries(self, target: MemoryTarget) -> list[str]:
        return parse_entries(self.read(target))

    def usage(self, target: MemoryTarget) -> str:
        return format_usage(len(join_entries(self.entries(target))), self.limit(target))

    def add(self, target: MemoryTarget, content: str) -> str:
        """Append an entry; rejects empty text, exact duplicates and anything over the limit."""
        entry = _checked_content(content, target)
        with directory_lock(self._dir):
            entries = self.entries(target)
            if entry in entries:
                raise MemoryEditError(
                    f"{FILE_NAMES[target]} already has exactly this entry; nothing was added."
                )
            self._write(target, entries, [*entries, entry])
            return f"Added to {FILE_NAMES[target]} {self.usage(target)}"

    def replace(self, target: MemoryTarget, old_text: str, new_content: str) -> str:
        """Replace the one entry containing ``old_text`` with ``new_content``."""
        entry = _checked_content(new_content, target, empty_hint="To delete the entry, use remove instead.")
        with directory_lock(self._dir):
            entries = self.entries(target)
            index = self._match(target, entries, old_text)
            if entry in entries and entries.index(entry) != index:
                raise MemoryEditError(
                    f"{FILE_NAMES[target]} already has exactly this entry; remove the old one instead."
                )
            self._write(target, entries, [*entries[:index], entry, *entries[index + 1 :]])
            return f"Replaced an entry in {FILE_NAMES[target]} {self.usage(target)}"

    def remove(self, target: MemoryTarget, old_text: str) -> str:
        """Remove the one entry containing ``old_text``."""
        with directory_lock(self._dir):
            entries = self.entries(target)
            index = self._match(target, entries, old_text)
            self._write(target, entries, [*entries[:index], *entries[index + 1 :]])
            return f"Removed an entry from {FILE_NAMES[target]} {self.usage(target)}"

    def snapshot(self) -> MemorySnapshot:
        """The frozen memory text for the volatile layer ("" when both files are empty), and warnings.

        Rebuilt from parsed entries, so stray blank lines in a hand-edited file do not change the bytes.
        The files may have been edited by hand or grown by a bug, and the model itself writes them, so
        they are read like any untrusted text that goes into a prompt: bad UTF-8 is replaced, an entry
        that looks like a prompt injection is left out, and a file over its limit is cut to the limit.
        Each of these gives the user one line; the files are left as they are.
        """
        sections: list[str] = []
        warnings: list[str] = []
        for target in TARGETS:
            path, limit = self.path(target), self.limit(target)
            try:
                entries = parse_entries(read_text(path))
            except FileNotFoundError:
                continue
            kept = []
            for entry in entries:
                findings = scan_for_injection(entry)
                if findings:
                    warnings.append(
                        f"An entry of {path} was left out of the prompt: it looks like a prompt injection "
                        f"({findings[0]}). Remove or reword it."
                    )
                else:
                    kept.append(entry)
            if not kept:
                continue
            text = join_entries(kept)
            usage = format_usage(len(text), limit)
            if len(text) > limit:
                warnings.append(
                    f"{path} is {len(text):,} characters, over its limit of {limit:,}: only the first "
                    f"{limit:,} are in this session's prompt. Shorten the file (the file was not changed)."
                )
                text = f"{text[:limit]}\n[... cut at the {limit:,}-character limit]"
            sections.append(f"## {FILE_NAMES[target]} {usage}\n{text}")
        return MemorySnapshot("\n\n".join(sections), tuple(warnings))

    def _match(self, target: MemoryTarget, entries: list[str], old_text: str) -> int:
        """Index of the single entry containing ``old_text``; an exact whole-entry match breaks ties."""
        needle = old_text.strip()
        name = FILE_NAMES[target]
        if not needle:
            raise MemoryEditError(
                f"old_text is empty. Pass a unique piece of the entry to change.\n"
                f"Current entries of {name}:\n{numbered_entries(entries)}"
            )
        matches = [index for index, entry in enumerate(entries) if needle in entry]
        if len(matches) == 1:
            return matches[0]
        exact = [index for index in matches if entries[index] == needle]
        if len(exact) == 1:
            return exact[0]
        if not matches:
            raise MemoryEditError(
                f"No entry of {name} contains '{needle}'. Quote part of an entry exactly.\n"
                f"Current entries of {name}:\n{numbered_entries(entries)}"
            )
        numbers = ", ".join(str(index + 1) for index in matches)
        raise MemoryEditError(
            f"'{needle}' matches {len(matches)} entries of {name} ({numbers}). Use a longer piece of the "
            f"one you mean.\nCurrent entries of {name}:\n{numbered_entries(entries)}"
        )

    def _write(self, target: MemoryTarget, before: list[str], after: list[str]) -> None:
        """Write ``after`` if it fits the limit; otherwise raise and leave the file untouched."""
        text = join_entries(after)
        limit = self.limit(target)
        if len(text) > limit:
            name = FILE_NAMES[target]
            raise MemoryLimitError(
                f"{name} would be {len(text):,}/{limit:,} chars. Remove or shorten entries first; "
                f"current entries:\n{numbered_entries(before)}"
            )
        atomic_write_text(self.path(target), text)


@dataclass(frozen=True)
class MemorySnapshot:
    """What a new session's prompt gets of a scope's memory, and one line per problem found."""

    text: str
    warnings: tuple[str, ...] = ()


class MemoryBank:
    """Every scope's memory under one root (``HERALD_HOME/memories``), with the configured limits."""

    def __init__(self, root: Path, memory_char_limit: int, user_char_limit: int) -> None:
        self.root = root
        self.memory_char_limit = memory_char_limit
        self.user_char_limit = user_char_limit

    def store(self, scope: str) -> MemoryStore:
        """The files of ``scope``; raises ValueError for a malformed scope."""
        return MemoryStore(scope_directory(self.root, scope), self.memory_char_limit, self.user_char_limit)


def _checked_target(target: str) -> MemoryTarget:
    """The target, validated at run time too: the model may send any string."""
    for known in TARGETS:
        if target == known:
            return known
    raise MemoryEditError(
        f"Unknown memory target '{target}'. Use 'memory' (your notes) or 'user' (about the user)."
    )


def _checked_content(content: str, target: MemoryTarget, empty_hint: str = "") -> str:
    """Stripped entry text; refuses empty text and text that would split into several entries."""
    name = FILE_NAMES[_checked_target(target)]
    entry = content.strip()
    if not entry:
        hint = f" {empty_hint}" if empty_hint else " Pass the text to save."
        raise MemoryEditError(f"The content is empty; nothing was written to {name}.{hint}")
    if any(line.strip() == SEPARATOR for line in entry.split("\n")):
        raise MemoryEditError(
            f"The content contains a line with only '{SEPARATOR}', which separates entries in {name}. "
            "Save each entry separately."
        )
    findings = scan_for_injection(entry)
    if findings:
        raise MemoryEditError(
            f"Not saved: the entry looks like a prompt injection ({findings[0]}), and {name} goes into "
            "every future prompt. Save facts, not instructions to a model."
        )
    return entry
