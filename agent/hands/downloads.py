"""Where the browser's downloads land: the owner's workspace, ``downloads/``, and nowhere else.

The browser (``agent.tools.browser.downloads``) watches a download while Chromium fetches it and hands
the finished file to a :class:`WorkspaceDownloads`, which copies it in under a name made safe by an
allowlist (:func:`safe_name`), created with ``O_EXCL | O_NOFOLLOW`` in a folder opened without following
links (``agent.hands.paths``), numbered rather than overwriting (:func:`numbered`), and only if the
workspace quota (``tools.workspace_quota_mb``) leaves room; on the file tools' own threads.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from agent.hands.file_pool import FilePool
from agent.hands.paths import Confinement
from agent.hands.quota import usage
from agent.tools.browser.downloads import TooBig, too_big
from agent.tools.registry import ToolError

FOLDER = "downloads"  # inside the workspace
FALLBACK_NAME = "download"
MAX_NAME_CHARS = 120  # well under the 255 bytes a file name may take, even in a 2-byte script
MAX_SUFFIX_CHARS = 16
MAX_NUMBER = 999  # name-2.csv .. name-999.csv, then the download is refused
CHUNK = 1024 * 1024
_NOT_ALLOWED = re.compile(r"[^\w.+-]+")  # letters and digits of any script, _ . + - ; nothing else


@dataclass(frozen=True)
class WorkspaceDownloads:
    """Where a session's downloads go: the hands' workspace, their file threads, the quota and the cap."""

    confinement: Confinement
    pool: FilePool
    max_bytes: int  # web.browser.max_download_mb
    quota_mb: int | None  # tools.workspace_quota_mb

    async def keep(self, staged: Path, suggested: str) -> tuple[str, int]:
        """The finished download at ``staged`` copied in (:func:`save`), on the file threads."""
        return await self.pool.run(functools.partial(save, self, staged, suggested))


def safe_name(suggested: str) -> str:
    """A file name for ``suggested`` (the site's): its last path part, only letters, digits, ``_ . + -``
    (runs of anything else become one ``_``), no leading dot, at most :data:`MAX_NAME_CHARS`."""
    last = re.split(r"[/\\]", suggested)[-1]
    name = _NOT_ALLOWED.sub("_", unicodedata.normalize("NFC", last)).strip("._-+")
    if not name:
        return FALLBACK_NAME
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem or len(suffix) > MAX_SUFFIX_CHARS:
        return name[:MAX_NAME_CHARS].rstrip("._-+") or FALLBACK_NAME
    return f"{stem[: MAX_NAME_CHARS - len(suffix) - 1].rstrip('._-+')}.{suffix}"


def numbered(name: str, number: int) -> str:
    """``report.pdf`` as ``report-2.pdf``: the name taken when ``report.pdf`` is there already."""
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}-{number}.{suffix}" if dot and stem else f"{name}-{number}"


def save(place: WorkspaceDownloads, staged: Path, suggested: str) -> tuple[str, int]:
    """Copy the finished download at ``staged`` into the workspace's :data:`FOLDER` under a safe, unused
    name; its path relative to the workspace and its size. Blocking: run it on the file threads."""
    with open(staged, "rb") as source:
        size = os.fstat(source.fileno()).st_size
        if size > place.max_bytes:
            raise TooBig(too_big(place.max_bytes))
        if place.quota_mb is not None:
            used = usage(place.confinement.roots)
            if used + size > place.quota_mb * 1048576:
                raise ToolError(
                    f"its {size:,} bytes would pass the workspace's quota of {place.quota_mb:,} MB "
                    f"(tools.workspace_quota_mb; {used / 1048576:,.1f} MB in use); nothing was saved"
                )
        with place.confinement.folder(place.confinement.workspace / FOLDER, make=True) as folder:
            fd, name = create(folder, safe_name(suggested))
            try:
                with os.fdopen(fd, "wb") as target:
                    copied = 0
                    while chunk := source.read(CHUNK):
                        copied += len(chunk)
                        if copied > place.max_bytes:
                            raise TooBig(too_big(place.max_bytes))
                        target.write(chunk)
                    target.flush()
                    os.fsync(target.fileno())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=folder)
                raise
    return f"{FOLDER}/{name}", copied


def create(folder: int, name: str) -> tuple[int, str]:
    """A new regular file in ``folder`` named ``name``, else ``name-2``, ``name-3``…: never an existing
    file, never through a link (``O_EXCL | O_NOFOLLOW``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for number in range(1, MAX_NUMBER + 1):
        candidate = name if number == 1 else numbered(name, number)
        try:
            return os.open(candidate, flags, 0o600, dir_fd=folder), candidate
        except FileExistsError:
            continue
    raise ToolError(f"{FOLDER}/ holds {name} and {MAX_NUMBER - 1} numbered copies already; nothing was saved")
