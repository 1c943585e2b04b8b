"""What the file tools do on disk: read, write, patch, list and search, confined (``agent.hands.paths``).

Every function blocks (run it in a thread) and raises ``ToolError`` with one sentence the model can act
on: a binary or oversized file, a patch whose text is not there or not unique, a path outside the
allowed folders. Writes replace a file in one step (a temporary file renamed over it, its permissions
kept), so an interrupted write never leaves half a file.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import regex

from agent.files.text import valid_text
from agent.hands.paths import Confinement, PathChanged
from agent.tools.registry import ToolError

BINARY_SNIFF = 8192  # a NUL byte in this many first bytes: a binary file
MAX_LINE_CHARS = 2000  # longer lines are cut when read
READ_CHARS = 40_000  # what one read_file returns at most (the model asks for the next lines with offset)
DEFAULT_LINES = 2000
MAX_ENTRIES = 500  # list_files
MAX_DEPTH = 5
MAX_MATCHES = 100  # search_files shows this many
MATCH_CHARS = 300
SEARCH_SECONDS = 20.0  # a whole search
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__"})


@dataclass(frozen=True)
class FileLimits:
    max_bytes: int  # tools.max_file_bytes


def _read_bytes(confinement: Confinement, path: Path, limits: FileLimits, shown: str) -> bytes:
    try:
        fd = confinement.open_regular(path)
    except FileNotFoundError:
        raise ToolError(f"'{shown}' does not exist.") from None
    except IsADirectoryError:
        raise ToolError(f"'{shown}' is a folder; list_files shows what is in it.") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_nlink > 1:
            raise ToolError(
                f"'{shown}' has another name (a hard link), which may be one of Herald's or the owner's "
                "secret files, so the file tools do not read it. Ask the owner about it."
            )
        size = info.st_size
        if size > limits.max_bytes:
            raise ToolError(
                f"'{shown}' is {size:,} bytes, over the {limits.max_bytes:,} the file tools read "
                "(tools.max_file_bytes); look at parts of it with a command (head, tail, grep)."
            )
        data = handle.read(limits.max_bytes + 1)
    if b"\x00" in data[:BINARY_SNIFF]:
        raise ToolError(f"'{shown}' is a binary file ({len(data):,} bytes); the file tools read text only.")
    return data


def _text(data: bytes) -> str:
    return valid_text(data.decode("utf-8", "replace"))


def read_file(
    confinement: Confinement, raw: str, limits: FileLimits, *, offset: int = 1, limit: int = DEFAULT_LINES
) -> str:
    """Lines ``offset`` .. ``offset + limit - 1`` (from 1) of a text file, numbered."""
    if offset < 1 or limit < 1:
        raise ToolError("'offset' and 'limit' count lines from 1; both must be at least 1.")
    path = confinement.resolve(raw)
    shown = confinement.relative(path)
    lines = _text(_read_bytes(confinement, path, limits, shown)).splitlines()
    if not lines:
        return f"{shown} is empty."
    if offset > len(lines):
        raise ToolError(f"'{shown}' has {len(lines):,} lines; offset {offset:,} is past its end.")
    out: list[str] = []
    size = 0
    last = offset - 1
    for number in range(offset, min(len(lines), offset + limit - 1) + 1):
        line = lines[number - 1]
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f"… [{len(line) - MAX_LINE_CHARS:,} more characters]"
        entry = f"{number:6}\t{line}"
        if out and size + len(entry) > READ_CHARS:
            break
        out.append(entry)
        size += len(entry) + 1
        last = number
    header = f"{shown}: lines {offset:,}-{last:,} of {len(lines):,}"
    if last < len(lines):
        header += f" (more: offset={last + 1})"
    return header + "\n" + "\n".join(out)


def write_file(confinement: Confinement, raw: str, content: str, limits: FileLimits) -> str:
    """Create or replace a text file (and the folders it needs) with ``content``."""
    path = confinement.resolve(raw)
    shown = confinement.relative(path)
    data = content.encode("utf-8")
    if len(data) > limits.max_bytes:
        raise ToolError(
            f"That is {len(data):,} bytes, over the {limits.max_bytes:,} write_file writes "
            "(tools.max_file_bytes)."
        )
    existed = _replace(confinement, path, data, shown)
    done = "Replaced" if existed else "Created"
    return f"{done} {shown} ({len(data):,} bytes, {_line_count(content):,} lines)."


def patch_file(confinement: Confinement, raw: str, old: str, new: str, limits: FileLimits) -> str:
    """Replace the one place ``old`` occurs in a text file with ``new``; refused when it occurs never or
    more than once (the model then gives more of the surrounding text)."""
    if not old:
        raise ToolError("'old' is empty; give the exact text to replace, as it is in the file.")
    if old == new:
        raise ToolError("'old' and 'new' are the same; nothing would change.")
    path = confinement.resolve(raw)
    shown = confinement.relative(path)
    text = _text(_read_bytes(confinement, path, limits, shown))
    count = text.count(old)
    if count == 0:
        hint = (
            " It is there with other spacing or line ends: copy it exactly (read_file shows the file)."
            if _squeezed(old) in _squeezed(text)
            else " read_file shows what the file holds now."
        )
        raise ToolError(f"The text to replace is not in '{shown}'.{hint}")
    if count > 1:
        lines = _lines_of(text, old)
        raise ToolError(
            f"The text to replace occurs {count} times in '{shown}' (lines {', '.join(map(str, lines[:10]))}"
            "); "
            "include more of the surrounding text so that it occurs once."
        )
    at = text.index(old)
    patched = text[:at] + new + text[at + len(old) :]
    data = patched.encode("utf-8")
    if len(data) > limits.max_bytes:
        raise ToolError(f"The patched file would be {len(data):,} bytes, over tools.max_file_bytes.")
    _replace(confinement, path, data, shown)
    line = text.count("\n", 0, at) + 1
    return f"Patched {shown} at line {line}: {_line_count(old)} line(s) replaced by {_line_count(new)}."


def list_files(confinement: Confinement, raw: str, *, depth: int = 1) -> str:
    """The folder's entries (``depth`` levels down), folders marked with a slash, links with their target."""
    if not 1 <= depth <= MAX_DEPTH:
        raise ToolError(f"'depth' must be 1 to {MAX_DEPTH}.")
    path = confinement.resolve(raw or ".")
    shown = confinement.relative(path)
    lines: list[str] = []
    more = _list(confinement, path, "", depth, lines)
    if not lines:
        return f"{shown} is empty."
    footer = f"\n[only the first {MAX_ENTRIES} entries are shown; list a subfolder]" if more else ""
    return f"{shown}:\n" + "\n".join(lines) + footer


def _list(confinement: Confinement, folder: Path, prefix: str, depth: int, lines: list[str]) -> bool:
    """Add ``folder``'s entries to ``lines``; True when :data:`MAX_ENTRIES` cut the listing short."""
    try:
        with confinement.folder(folder) as fd:
            entries = [_entry(entry, fd) for entry in os.scandir(fd)]
    except NotADirectoryError:
        raise ToolError(f"'{confinement.relative(folder)}' is a file; read_file reads it.") from None
    except FileNotFoundError:
        raise ToolError(f"'{confinement.relative(folder)}' does not exist.") from None
    for name, kind, detail in sorted(entries):
        if len(lines) >= MAX_ENTRIES:
            return True
        shown = prefix + name
        if kind == "link":
            lines.append(f"{shown} -> {detail}")
        elif kind == "folder":
            lines.append(f"{shown}/")
            deeper = depth > 1 and name not in SKIPPED_FOLDERS
            if deeper and _list(confinement, folder / name, shown + "/", depth - 1, lines):
                return True
        else:
            lines.append(f"{shown}  {detail}")
    return False


def _entry(entry: os.DirEntry[str], folder: int) -> tuple[str, str, str]:
    """(name, "link" | "folder" | "file", the link's target or the file's size) of one folder entry."""
    try:
        if entry.is_symlink():
            return entry.name, "link", os.readlink(entry.name, dir_fd=folder)
        if entry.is_dir(follow_symlinks=False):
            return entry.name, "folder", ""
        return entry.name, "file", f"{entry.stat(follow_symlinks=False).st_size:,} bytes"
    except OSError:
        return entry.name, "file", "(gone)"


def search_files(
    confinement: Confinement,
    pattern: str,
    raw: str,
    limits: FileLimits,
    *,
    glob: str | None = None,
) -> str:
    """Lines matching the regular expression ``pattern`` in the text files under a folder (or in one file),
    as ``path:line: text``; at most :data:`MAX_MATCHES` shown, within :data:`SEARCH_SECONDS`."""
    try:
        compiled = regex.compile(pattern)
    except regex.error as error:
        raise ToolError(f"'pattern' is not a regular expression: {error}.") from None
    root = confinement.resolve(raw or ".")
    deadline = time.monotonic() + SEARCH_SECONDS
    matches: list[str] = []
    total = files = 0
    stopped = ""
    for path in _files_under(confinement, root):
        if glob and not fnmatch.fnmatch(path.name, glob):
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            stopped = f"stopped after {SEARCH_SECONDS:.0f} s"
            break
        try:
            found = _search_one(confinement, path, compiled, limits, remaining)
        except TimeoutError:
            stopped = f"stopped after {SEARCH_SECONDS:.0f} s (the pattern is slow on this text)"
            break
        if found:
            files += 1
            total += len(found)
            shown = confinement.relative(path)
            matches.extend(
                f"{shown}:{number}: {line}" for number, line in found[: MAX_MATCHES - len(matches)]
            )
    where = confinement.relative(root)
    if not total:
        return f"No match for {pattern!r} in {where}" + (f" ({stopped})." if stopped else ".")
    head = f"{total:,} matching line(s) in {files:,} file(s) under {where}"
    if total > len(matches):
        head += f"; the first {len(matches)} shown (narrow 'path' or 'glob' for the rest)"
    if stopped:
        head += f"; {stopped}, so there may be more"
    return head + ":\n" + "\n".join(matches)


def _files_under(confinement: Confinement, root: Path) -> list[Path]:
    """The regular files to search: ``root`` itself, or those under it (links, FIFOs, sockets and
    devices are walked past: a FIFO's open would block the search for good)."""
    try:
        mode = root.lstat().st_mode
    except FileNotFoundError:
        raise ToolError(f"'{confinement.relative(root)}' does not exist.") from None
    if stat.S_ISREG(mode):
        return [root]
    if not stat.S_ISDIR(mode):
        raise ToolError(f"'{confinement.relative(root)}' is not a regular file or a folder.")
    found: list[Path] = []
    for folder, folders, names in os.walk(root, followlinks=False):
        folders[:] = sorted(name for name in folders if name not in SKIPPED_FOLDERS)
        for name in sorted(names):
            path = Path(folder) / name
            with contextlib.suppress(OSError):
                if stat.S_ISREG(path.lstat().st_mode):
                    found.append(path)
    return found


def _search_one(
    confinement: Confinement, path: Path, compiled: regex.Pattern[str], limits: FileLimits, seconds: float
) -> list[tuple[int, str]]:
    """(line number, line) of each matching line of one file; binary, oversized or vanished files give
    nothing. Raises TimeoutError when the pattern takes longer than ``seconds`` on it."""
    try:
        fd = confinement.open_regular(path)
    except (OSError, ToolError):
        return []
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_nlink > 1 or info.st_size > limits.max_bytes:
            return []  # a hard link may be a secret's: search_files skips it like read_file refuses it
        data = handle.read(limits.max_bytes + 1)
    if b"\x00" in data[:BINARY_SNIFF]:
        return []
    deadline = time.monotonic() + seconds
    found: list[tuple[int, str]] = []
    for number, line in enumerate(_text(data).splitlines(), start=1):
        if compiled.search(line, timeout=max(0.001, deadline - time.monotonic())) is not None:
            cut = line if len(line) <= MATCH_CHARS else line[:MATCH_CHARS] + "…"
            found.append((number, cut))
    return found


def _replace(confinement: Confinement, path: Path, data: bytes, shown: str) -> bool:
    """Write ``data`` to ``path`` in one step; True when a file was replaced (its permissions kept)."""
    with confinement.folder(path.parent, make=True) as folder:
        try:
            before = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            before = None
        if before is not None and stat.S_ISDIR(before.st_mode):
            raise ToolError(f"'{shown}' is a folder; give a file name inside it.")
        if before is not None and stat.S_ISLNK(before.st_mode):
            raise PathChanged(f"'{shown}' became a symbolic link; not followed.")
        temporary = f".{path.name}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if before is not None:
                    os.fchmod(handle.fileno(), stat.S_IMODE(before.st_mode))
                os.fsync(handle.fileno())
            os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
    return before is not None


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def _lines_of(text: str, needle: str) -> list[int]:
    lines = []
    start = text.find(needle)
    while start != -1:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(needle, start + 1)
    return lines
