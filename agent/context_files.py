"""Find and load the project context file for the "context" layer of the system prompt.

The file's text becomes part of a session's frozen system prompt, so what is injected must be
deterministic: it names the file by its name only (absolute paths differ per machine), line endings
are normalised, and a too-long file is cut at a fixed length with a visible note. A file that looks
like a prompt injection is not injected at all; the user gets a warning saying what to remove.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.untrusted.scan import scan_for_injection

# Searched from the working directory up to the git root, nearest directory first.
WALK_UP_NAMES: tuple[str, ...] = (".herald.md", "HERALD.md")
# Searched in the working directory only.
CWD_ONLY_NAMES: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md", ".cursorrules")

DEFAULT_MAX_CHARS = 20_000
MAX_FILE_BYTES = 1_000_000  # a larger "context file" is almost certainly a mistake; never read it whole
_FINDINGS_IN_WARNING = 3


@dataclass(frozen=True)
class ProjectContext:
    """The outcome of loading the project context file.

    ``path`` is the file used or rejected (None when there is none), ``text`` what to inject ("" when
    nothing is injected) and ``warning`` one sentence for the user when a file was found but not used.
    """

    path: Path | None
    text: str
    warning: str | None


def find_git_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` containing ``.git`` (a folder, or a file in worktrees)."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def _walk_up_dirs(cwd: Path) -> list[Path]:
    """``cwd`` and its parents up to the git root; only ``cwd`` outside a git repository."""
    root = find_git_root(cwd)
    if root is None:
        return [cwd]
    dirs = [cwd]
    for parent in cwd.parents:
        if dirs[-1] == root:
            break
        dirs.append(parent)
    return dirs


def find_project_context_file(cwd: Path) -> Path | None:
    """The project context file for ``cwd``: first match wins, nearest directory first."""
    cwd = cwd.resolve()
    for directory in _walk_up_dirs(cwd):
        for name in WALK_UP_NAMES:
            if (directory / name).is_file():
                return directory / name
    for name in CWD_ONLY_NAMES:
        if (cwd / name).is_file():
            return cwd / name
    return None


def normalize_context_text(text: str) -> str:
    """One byte form per content: no BOM, LF line endings, no surrounding blank space."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").strip()


def truncate_context(text: str, name: str, max_chars: int) -> str:
    """Cut to ``max_chars`` with a note, so the model knows it is seeing only part of the file."""
    if len(text) <= max_chars:
        return text
    note = f"[... truncated: {name} is {len(text):,} characters; only the first {max_chars:,} are included]"
    return f"{text[:max_chars]}\n\n{note}"


def format_project_context(name: str, text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The exact text injected into the context layer ("" for an empty file)."""
    body = normalize_context_text(text)
    if not body:
        return ""
    return f"# Project context (from {name})\n\n{truncate_context(body, name, max_chars)}"


def injection_warning(path: Path, findings: list[str]) -> str:
    """One sentence naming the file, what looked wrong, and what to do about it."""
    shown = "; ".join(findings[:_FINDINGS_IN_WARNING])
    more = len(findings) - _FINDINGS_IN_WARNING
    if more > 0:
        shown += f"; and {more} more"
    return (
        f"Project context {path} was not loaded: it looks like a prompt injection ({shown}). "
        "Remove that text to use the file."
    )


def _read_text(path: Path) -> tuple[str | None, str | None]:
    """(text, None) or (None, warning): an unreadable file must not stop a session from starting."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, (
                f"Project context {path} was not loaded: it is {size:,} bytes, over the "
                f"{MAX_FILE_BYTES:,}-byte limit. Keep project notes short; only the first "
                f"{DEFAULT_MAX_CHARS:,} characters would be used anyway."
            )
        raw = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        return None, (
            f"Project context {path} was not loaded: it could not be read ({reason}). "
            "Check that the file exists and is readable."
        )
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, (
            f"Project context {path} was not loaded: it is not UTF-8 text (invalid byte at offset "
            f"{exc.start}). Save it as UTF-8 to use the file."
        )


def load_project_context(cwd: Path, max_chars: int = DEFAULT_MAX_CHARS) -> ProjectContext:
    """Find, read, scan and format the project context file for ``cwd``.

    The whole file is scanned before truncation, so an injection past the cut still rejects it.
    """
    if max_chars <= 0:
        raise ValueError(f"max_chars must be a positive number of characters, got {max_chars}")
    path = find_project_context_file(cwd)
    if path is None:
        return ProjectContext(path=None, text="", warning=None)
    text, warning = _read_text(path)
    if text is None:
        return ProjectContext(path=path, text="", warning=warning)
    findings = scan_for_injection(text)
    if findings:
        return ProjectContext(path=path, text="", warning=injection_warning(path, findings))
    return ProjectContext(path=path, text=format_project_context(path.name, text, max_chars), warning=None)
