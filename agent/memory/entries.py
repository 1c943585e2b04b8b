"""The rules of memory, in one place for every backend: scopes, entries, limits, edits, the snapshot.

Everything here is a pure function of text: no disk, no database. A backend
(:class:`agent.memory.store.MemoryDocuments`) only reads and writes each scope's two documents;
what an edit does to a document, what is refused and why, and the exact bytes of the snapshot a new
session's prompt gets are decided here, so they are the same whichever backend holds the text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from agent.untrusted.scan import scan_for_injection

MemoryTarget = Literal["memory", "user"]

SEPARATOR = "§"
ENTRY_JOINER = f"\n{SEPARATOR}\n"
TARGETS: tuple[MemoryTarget, ...] = ("memory", "user")
FILE_NAMES: dict[MemoryTarget, str] = {"memory": "MEMORY.md", "user": "USER.md"}

OWNER_SCOPE = "owner"
SCOPE_KINDS = ("user", "chat")


def user_scope(platform: str, user_id: str) -> str:
    """The scope of one person's private memory on one platform."""
    return f"user:{platform}:{user_id}"


def chat_scope(platform: str, chat_id: str) -> str:
    """The scope of a group chat's shared memory."""
    return f"chat:{platform}:{chat_id}"


@dataclass(frozen=True)
class ScopeParts:
    """A scope other than the owner's: its kind ("user" or "chat"), platform and id."""

    kind: str
    platform: str
    ident: str


def scope_parts(scope: str) -> ScopeParts | None:
    """The parts of ``scope`` (None for the owner's); raises ValueError for a malformed scope."""
    if scope == OWNER_SCOPE:
        return None
    kind, _, rest = scope.partition(":")
    platform, _, ident = rest.partition(":")
    if kind not in SCOPE_KINDS or not platform or not ident or "\x00" in scope:
        raise ValueError(
            f"unknown memory scope {scope!r}: expected owner, user:PLATFORM:ID or chat:PLATFORM:ID"
        )
    return ScopeParts(kind, platform, ident)


class MemoryToolError(Exception):
    """A memory edit was refused; the message tells the model or user what to do instead."""


class MemoryLimitError(MemoryToolError):
    """The edit would push a document over its character limit; nothing was written."""


class MemoryEditError(MemoryToolError):
    """The edit is invalid (empty, duplicate, ambiguous or unmatched text); nothing was written."""


class MemoryChangedError(MemoryToolError):
    """The document changed between reading it and saving it (a whole-text edit); nothing was written."""


def format_usage(used: int, limit: int) -> str:
    """Usage like "[67% — 1,474/2,200 chars]"; rounded down, so 100% only when truly full."""
    if limit <= 0:
        raise ValueError(f"limit must be a positive number of characters, got {limit}")
    return f"[{used * 100 // limit}% — {used:,}/{limit:,} chars]"


def parse_entries(text: str) -> list[str]:
    """Entries of a memory document: split at lines holding only "§", stripped, empty ones dropped.

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
    """The document text for ``entries``; its length is what the limit applies to."""
    return ENTRY_JOINER.join(entries)


def usage_of(text: str, limit: int) -> str:
    """The usage of a document as the limit counts it (its entries, joined)."""
    return format_usage(len(join_entries(parse_entries(text))), limit)


def numbered_entries(entries: list[str]) -> str:
    """Entries as "1) ...", one per line, so the model can quote the one it means."""
    if not entries:
        return "(none)"
    return "\n".join(f"{number}) {entry}" for number, entry in enumerate(entries, start=1))


def checked_target(target: str) -> MemoryTarget:
    """The target, validated at run time too: the model may send any string."""
    for known in TARGETS:
        if target == known:
            return known
    raise MemoryEditError(
        f"Unknown memory target '{target}'. Use 'memory' (your notes) or 'user' (about the user)."
    )


def refusal(entry: str, name: str) -> str | None:
    """Why ``entry`` may not be saved in the document ``name`` (None: it may)."""
    if "\x00" in entry:
        return f"the entry contains a NUL character, which {name} cannot hold. Remove it."
    findings = scan_for_injection(entry)
    if findings:
        return (
            f"the entry looks like a prompt injection ({findings[0]}), and {name} goes into every future "
            "prompt. Save facts, not instructions to a model."
        )
    return None


def checked_content(content: str, target: MemoryTarget, empty_hint: str = "") -> str:
    """Stripped entry text; refuses empty text, text that would split into several entries, a NUL
    character, and anything that looks like a prompt injection."""
    name = FILE_NAMES[checked_target(target)]
    entry = content.strip()
    if not entry:
        hint = f" {empty_hint}" if empty_hint else " Pass the text to save."
        raise MemoryEditError(f"The content is empty; nothing was written to {name}.{hint}")
    if any(line.strip() == SEPARATOR for line in entry.split("\n")):
        raise MemoryEditError(
            f"The content contains a line with only '{SEPARATOR}', which separates entries in {name}. "
            "Save each entry separately."
        )
    reason = refusal(entry, name)
    if reason is not None:
        raise MemoryEditError(f"Not saved: {reason}")
    return entry


def match_entry(target: MemoryTarget, entries: list[str], old_text: str) -> int:
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


def fitted(target: MemoryTarget, limit: int, before: list[str], after: list[str]) -> str:
    """The document text for ``after``, or MemoryLimitError when it is over ``limit``."""
    text = join_entries(after)
    if len(text) > limit:
        raise MemoryLimitError(
            f"{FILE_NAMES[target]} would be {len(text):,}/{limit:,} chars. Remove or shorten entries first; "
            f"current entries:\n{numbered_entries(before)}"
        )
    return text


# -- the edits: each a function of the document's current text to its new text -------------------

Edit = Callable[[str], str | None]  # current text -> new text (None: leave the document as it is)


def add_edit(target: MemoryTarget, limit: int, content: str) -> Edit:
    """Append an entry; rejects empty text, exact duplicates and anything over the limit."""
    entry = checked_content(content, target)

    def edit(current: str) -> str:
        entries = parse_entries(current)
        if entry in entries:
            raise MemoryEditError(f"{FILE_NAMES[target]} already has exactly this entry; nothing was added.")
        return fitted(target, limit, entries, [*entries, entry])

    return edit


def replace_edit(target: MemoryTarget, limit: int, old_text: str, new_content: str) -> Edit:
    """Replace the one entry containing ``old_text`` with ``new_content``."""
    entry = checked_content(new_content, target, empty_hint="To delete the entry, use remove instead.")

    def edit(current: str) -> str:
        entries = parse_entries(current)
        index = match_entry(target, entries, old_text)
        if entry in entries and entries.index(entry) != index:
            raise MemoryEditError(
                f"{FILE_NAMES[target]} already has exactly this entry; remove the old one instead."
            )
        return fitted(target, limit, entries, [*entries[:index], entry, *entries[index + 1 :]])

    return edit


def remove_edit(target: MemoryTarget, limit: int, old_text: str) -> Edit:
    """Remove the one entry containing ``old_text``."""

    def edit(current: str) -> str:
        entries = parse_entries(current)
        index = match_entry(target, entries, old_text)
        return fitted(target, limit, entries, [*entries[:index], *entries[index + 1 :]])

    return edit


def whole_text_edit(target: MemoryTarget, limit: int, text: str, *, expected: str) -> Edit:
    """Replace the whole document with ``text`` (a person's edit of it), stored as clean entries.

    ``expected`` is the text the person started from: if the document changed since, nothing is saved
    (MemoryChangedError). Entries the person left as they were (whitespace aside) leave the document as it
    is (the edit returns None). Every
    entry is checked like one the model saves, and the whole must fit the limit; the message of a refusal
    gives the numbers.
    """
    name = FILE_NAMES[checked_target(target)]
    entries = parse_entries(text)
    if entries == parse_entries(expected):
        return lambda current: None
    for number, entry in enumerate(entries, start=1):
        reason = refusal(entry, name)
        if reason is not None:
            raise MemoryEditError(f"{name} was not saved: entry {number} is refused: {reason}")
    new_text = join_entries(entries)
    over = len(new_text) - limit
    if over > 0:
        raise MemoryLimitError(
            f"{name} would be {len(new_text):,}/{limit:,} chars, {over:,} over its limit; nothing was saved. "
            "Shorten it and try again."
        )

    def edit(current: str) -> str | None:
        if current != expected:
            raise MemoryChangedError(
                f"{name} was changed by someone else while you were editing it; nothing was saved. "
                "Edit it again."
            )
        return new_text

    return edit


# -- the snapshot -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySnapshot:
    """What a new session's prompt gets of a scope's memory, and one line per problem found."""

    text: str
    warnings: tuple[str, ...] = ()


def snapshot_of(
    texts: Mapping[MemoryTarget, str | None],
    limits: Mapping[MemoryTarget, int],
    where: Callable[[MemoryTarget], str],
) -> MemorySnapshot:
    """The frozen memory text for the volatile layer ("" when both documents are empty), and warnings.

    Rebuilt from parsed entries, so stray blank lines in a hand-edited document do not change the bytes.
    The documents may have been edited by hand or grown by a bug, and the model itself writes them, so
    they are read like any untrusted text that goes into a prompt: an entry that looks like a prompt
    injection is left out, and a document over its limit is cut to the limit. Each of these gives the
    user one line (``where`` names the document); the documents are left as they are.
    """
    sections: list[str] = []
    warnings: list[str] = []
    for target in TARGETS:
        raw = texts.get(target)
        if raw is None:
            continue
        limit, kept = limits[target], []
        for entry in parse_entries(raw):
            findings = scan_for_injection(entry)
            if findings:
                warnings.append(
                    f"An entry of {where(target)} was left out of the prompt: it looks like a prompt "
                    f"injection ({findings[0]}). Remove or reword it."
                )
            else:
                kept.append(entry)
        if not kept:
            continue
        text = join_entries(kept)
        usage = format_usage(len(text), limit)
        if len(text) > limit:
            warnings.append(
                f"{where(target)} is {len(text):,} characters, over its limit of {limit:,}: only the first "
                f"{limit:,} are in this session's prompt. Shorten it (it was left as it is)."
            )
            text = f"{text[:limit]}\n[... cut at the {limit:,}-character limit]"
        sections.append(f"## {FILE_NAMES[target]} {usage}\n{text}")
    return MemorySnapshot("\n\n".join(sections), tuple(warnings))
