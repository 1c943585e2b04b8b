"""Downloads a page starts, saved into the owner's workspace (``downloads/``) — and nowhere else.

Only a session that has a workspace (the owner's, with the hands' tool sets on) gets a browser context
that accepts downloads; every other one refuses them as before. Chromium fetches the file through the
guarded proxy like everything else (a download redirected to a private address never starts), into
Playwright's own temporary folder. :func:`watch` measures that file while it grows and cancels the
download once it passes ``web.browser.max_download_mb`` (the bound is the cap plus what arrives between
two measurements), then :func:`save` copies it into the workspace: under a name made safe by an
allowlist (:func:`safe_name`), created with ``O_EXCL | O_NOFOLLOW`` in a folder opened without following
links (``agent.hands.paths``), numbered rather than overwriting, and only if the workspace quota
(``tools.workspace_quota_mb``) leaves room. Anything refused leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.hands.file_pool import FilePool
from agent.hands.paths import Confinement
from agent.hands.quota import usage
from agent.tools.registry import ToolError

if TYPE_CHECKING:
    from playwright.async_api import Download

FOLDER = "downloads"  # inside the workspace
FALLBACK_NAME = "download"
MAX_NAME_CHARS = 120  # well under the 255 bytes a file name may take, even in a 2-byte script
MAX_SUFFIX_CHARS = 16
MAX_NUMBER = 999  # name-2.csv .. name-999.csv, then the download is refused
WATCH_INTERVAL = 0.1  # seconds between two measurements of a growing download
CHUNK = 1024 * 1024
_NOT_ALLOWED = re.compile(r"[^\w.+-]+")  # letters and digits of any script, _ . + - ; nothing else


class TooBig(ToolError):
    """The download is over ``web.browser.max_download_mb``."""


@dataclass(frozen=True)
class DownloadPlace:
    """Where a session's downloads go: the hands' workspace, their file threads, the quota and the cap."""

    confinement: Confinement
    pool: FilePool
    max_bytes: int  # web.browser.max_download_mb
    quota_mb: int | None  # tools.workspace_quota_mb


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


def staged_path(download: Download) -> Path | None:
    """Where Chromium writes ``download`` while it runs (it adds ``.crdownload`` until it is done).

    Playwright's public API gives the path only once the download has finished, too late to stop one
    that would fill the disk; the artifact's ``absolutePath`` (Playwright's protocol) has it from the
    start. None when this Playwright does not say: the download is then refused, not saved unwatched.
    """
    impl: Any = getattr(download, "_impl_obj", None)
    initializer = getattr(getattr(impl, "_artifact", None), "_initializer", None)
    path = initializer.get("absolutePath") if isinstance(initializer, dict) else None
    return Path(path) if isinstance(path, str) and path else None


def staged_size(path: Path) -> int:
    """Bytes written so far of the download staged at ``path`` (0 before Chromium creates the file)."""
    for candidate in (path.with_name(path.name + ".crdownload"), path):
        with contextlib.suppress(OSError):
            return candidate.stat().st_size
    return 0


async def watch(download: Download, staged: Path, max_bytes: int) -> Path:
    """Wait for ``download`` to finish, cancelling it as soon as it grows past ``max_bytes``; the
    finished file. :class:`TooBig` when it was cancelled for its size, ToolError when it failed."""
    finished = asyncio.ensure_future(download.path())
    try:
        while not finished.done():
            if staged_size(staged) > max_bytes:
                await download.cancel()
                raise TooBig(too_big(max_bytes))
            await asyncio.wait([finished], timeout=WATCH_INTERVAL)
    except BaseException:
        finished.cancel()
        raise
    failure = await download.failure() or finished.exception()
    if failure:
        raise ToolError(f"the download failed ({failure})")
    return finished.result()


def too_big(max_bytes: int) -> str:
    return f"it is over {max_bytes / 1048576:g} MB (web.browser.max_download_mb); nothing was saved"


async def receive(download: Download, place: DownloadPlace) -> str:
    """Watch ``download`` and save it into the workspace; what the model is told (a sentence). The
    temporary copy is always deleted."""
    staged = staged_path(download)
    try:
        if staged is None:
            await download.cancel()
            return "refused: this Playwright does not say where it stages downloads, so none is saved"
        try:
            finished = await watch(download, staged, place.max_bytes)
            saved, size = await place.pool.run(
                functools.partial(save, place, finished, download.suggested_filename)
            )
        except ToolError as refusal:
            return f"refused: {refusal}"
        except OSError as error:  # the disk is full, the folder is not writable
            return f"not saved: it could not be written ({error.strerror or error})"
        return f"saved to {saved} in the workspace ({size:,} bytes)"
    finally:
        with contextlib.suppress(Exception):  # the browser may be gone already
            await download.delete()


def save(place: DownloadPlace, staged: Path, suggested: str) -> tuple[str, int]:
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
