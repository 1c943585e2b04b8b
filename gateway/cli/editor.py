"""``$EDITOR`` on a piece of stored text, for ``herald memory edit`` and ``herald skills edit``.

The text goes into a private temporary file (0600: memory is about people), the editor (``$EDITOR``,
which may carry arguments such as ``code --wait``; ``vi`` when it is not set) runs on it in the
terminal, and the result is handed to ``save``. When ``save`` refuses it, the message says why and
where the edited text was kept, so nothing typed is lost; otherwise the file is deleted.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.memory import MemoryToolError
from agent.skills import SkillError
from gateway.failures import EXIT_FAILED, EXIT_UNUSABLE, CommandFailed

DEFAULT_EDITOR = "vi"

Save = Callable[[str], Awaitable[str | None]]  # the edited text -> what was done (None: nothing changed)


def editor_command() -> list[str]:
    """``$EDITOR`` split like a shell would (``vi`` when unset or blank)."""
    value = os.environ.get("EDITOR", "").strip() or DEFAULT_EDITOR
    try:
        command = shlex.split(value)
    except ValueError as error:
        raise CommandFailed(
            f"$EDITOR ({value!r}) cannot be read as a command ({error}).", EXIT_UNUSABLE
        ) from None
    return command or [DEFAULT_EDITOR]


def _run_editor(path: Path) -> None:
    command = editor_command()
    try:
        status = subprocess.run([*command, str(path)], check=False).returncode
    except OSError as error:
        raise CommandFailed(
            f"cannot start the editor {command[0]!r} ({error.strerror or error}); set $EDITOR to an editor "
            "that is installed, e.g. EDITOR=nano.",
            EXIT_UNUSABLE,
        ) from None
    if status != 0:
        raise CommandFailed(f"the editor {command[0]!r} exited with status {status}; nothing was saved.")


def _read_edited(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise CommandFailed("the edited text is not UTF-8; nothing was saved.") from None


def _edit_file(text: str, name: str) -> tuple[Path, str]:
    """Write ``text`` to a new private file, run the editor on it, read it back (blocking)."""
    fd, name_on_disk = tempfile.mkstemp(prefix="herald-", suffix=f"-{name}")
    path = Path(name_on_disk)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
        _run_editor(path)
        return path, _read_edited(path)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


async def edit_then_save(text: str, name: str, save: Save) -> str | None:
    """Let the user edit ``text`` (in a file named like ``herald-*-NAME``), then ``save`` the result.

    Returns what ``save`` returned. When ``save`` fails the edited text is kept and its file named: a
    refusal (``MemoryToolError``, ``SkillError``) becomes a :class:`CommandFailed` saying why; any other
    failure (a database that cannot be reached) is raised after one line on stderr.
    """
    path, edited = await asyncio.to_thread(_edit_file, text, name)
    try:
        result = await save(edited)
    except (MemoryToolError, SkillError) as error:
        raise CommandFailed(f"{error} Your edited text is kept in {path}.", EXIT_FAILED) from None
    except BaseException:
        print(f"herald: your edited text is kept in {path}", file=sys.stderr)
        raise
    await asyncio.to_thread(path.unlink, missing_ok=True)
    return result
