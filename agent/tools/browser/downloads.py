"""Downloads a page starts, saved into the owner's workspace (``downloads/``) — and nowhere else.

Only a session that has a workspace (the owner's, with the hands' tool sets on) gets a browser context
that accepts downloads; every other one refuses them as before. Chromium fetches the file through the
guarded proxy like everything else (a download redirected to a private address never starts), into
Playwright's own temporary folder. :func:`watch` measures that file while it grows and cancels the
download once it passes ``web.browser.max_download_mb`` (the bound is the cap plus what arrives between
two measurements), then the place keeps it in the workspace: under a name made safe by an
allowlist, created with ``O_EXCL | O_NOFOLLOW`` in a folder opened without following links, numbered
rather than overwriting, and only if the workspace quota (``tools.workspace_quota_mb``) leaves room
(``agent.hands.downloads``, the :class:`DownloadPlace` the runtime hands the browser). Anything refused
leaves nothing behind. Every download a page starts in the owner's session is in the audit of the
owner's tools (``agent.store.audit``, the console's Activity), saved or not: :func:`audited`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent.store.audit import AuditEntry, Outcome
from agent.tools.registry import ToolContext, ToolError

if TYPE_CHECKING:
    from playwright.async_api import Download

WATCH_INTERVAL = 0.1  # seconds between two measurements of a growing download
UNSTAGED = "refused: this Playwright does not say where it stages downloads, so none is saved"
TOOL = "browser_download"  # the audit's name for a download a page started


@dataclass(frozen=True)
class Received:
    """What became of a download: ``said`` to the model (a sentence), and where it was saved in the
    workspace with its size ("" and 0 when it was not)."""

    said: str
    saved: str = ""
    size: int = 0


Witness = Callable[[str, Received], Awaitable[None]]
"""Records a download (its address, what became of it) in the audit: :func:`audited`."""


class TooBig(ToolError):
    """The download is over ``web.browser.max_download_mb``."""


class DownloadPlace(Protocol):
    """Where a session's downloads are kept (the owner's workspace: ``agent.hands.downloads``)."""

    @property
    def max_bytes(self) -> int:
        """``web.browser.max_download_mb`` in bytes: a download is cancelled past it."""
        ...

    async def keep(self, staged: Path, suggested: str) -> tuple[str, int]:
        """Copy the finished download at ``staged`` in under a safe name made from ``suggested``; its
        path as the model is told it and its size. Raises ToolError (refused) or OSError."""
        ...


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


async def receive(download: Download, place: DownloadPlace) -> Received:
    """Watch ``download`` and save it into the workspace; what became of it. The temporary copy is
    always deleted."""
    staged = staged_path(download)
    try:
        if staged is None:
            await download.cancel()
            return Received(UNSTAGED)
        try:
            finished = await watch(download, staged, place.max_bytes)
            saved, size = await place.keep(finished, download.suggested_filename)
        except ToolError as refusal:
            return Received(f"refused: {refusal}")
        except OSError as error:  # the disk is full, the folder is not writable
            return Received(f"not saved: it could not be written ({error.strerror or error})")
        return Received(f"saved to {saved} in the workspace ({size:,} bytes)", saved, size)
    finally:
        with contextlib.suppress(Exception):  # the browser may be gone already
            await download.delete()




def audited(context: ToolContext) -> Witness:
    """The witness of ``context``'s session: each download a row of the audit, with the session, the
    person the turn answers, the address, and the file in the workspace and its size (or why not)."""
    person = context.approver.person if context.approver is not None else None

    async def witness(url: str, received: Received) -> None:
        outcome = Outcome.RAN if received.saved else Outcome.FAILED
        entry = AuditEntry(context.session_key, context.session_id, TOOL, f"download {url}", outcome,
                           detail=received.said, person=person)  # fmt: skip
        await context.store.audit.record(entry)

    return witness
