"""The browser's lifecycle: one Chromium per process, launched at the first use, one context per session.

Chromium costs a second or two to start and a few hundred MB to keep, so it starts when a session first
uses a browser tool, not with Herald. Each session gets a context of its own (its own cookies, storage
and proxy credentials: nothing one chat logged into is seen by another), at most
``web.browser.max_pages`` pages in it (a page opened beyond that — a popup, ``target=_blank`` — is
closed at once and the model told), and the context is closed when the session has not used it for
``web.browser.idle_timeout`` seconds. :meth:`BrowserHost.aclose` (with the runtime) closes everything.

Every context is made with the guarded proxy (:mod:`agent.tools.browser.proxy`), service workers blocked
(they could fetch on their own, outside the page), and every Playwright wait bounded by
``web.browser.timeout``. Downloads are accepted only in a context given a :class:`DownloadPlace` (the
owner's session, with a workspace) and go there (:mod:`agent.tools.browser.downloads`); every other
context refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.settings import BrowserSettings
from agent.tools.browser.downloads import DownloadPlace, Received, Witness, receive
from agent.tools.registry import ToolError
from agent.tools.web.addresses import AddressPolicy
from agent.untrusted.envelope import mark_untrusted

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Download, Page, Playwright

    from agent.tools.browser.proxy import Credentials, GuardedProxy, Tenant

log = logging.getLogger(__name__)

VIEWPORT = {"width": 1280, "height": 800}
# No GPU, no shared-memory surprises in containers, no WebRTC over UDP (it does not go through a proxy).
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-background-networking",
)
LAUNCH_TIMEOUT = 60.0


class BrowserUnavailable(ToolError):
    """No browser can be started here; the message says what is missing and how to get it."""


def missing(settings: BrowserSettings) -> str | None:
    """What keeps the browser from starting (Playwright or Chromium not installed), or None."""
    try:
        import playwright  # noqa: F401 - only whether it is there
    except ImportError:
        return "the Python package playwright is not installed (pip install 'herald[browser]')"
    if not os.access(settings.executable, os.X_OK):
        return (
            f"Chromium is not installed at {settings.executable} (apt-get install chromium, or set "
            "web.browser.executable)"
        )
    return None


@dataclass
class SessionBrowser:
    """One session's context: its pages, the one being used, what its proxy refused."""

    context: BrowserContext
    credentials: Credentials
    tenant: Tenant
    max_pages: int
    page: Page | None = None
    closed_popups: int = 0
    last_used: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closing: set[asyncio.Future[None]] = field(default_factory=set)  # popups over the cap being closed
    place: DownloadPlace | None = None  # where downloads go; None: they are refused
    refused_downloads: list[str] = field(default_factory=list)  # file names the site tried to download
    downloading: set[asyncio.Future[None]] = field(default_factory=set)  # downloads being received
    download_notes: list[str] = field(default_factory=list)  # what became of finished downloads
    witness: Witness | None = None  # puts each download in the audit

    async def current_page(self, timeout: float) -> Page:  # noqa: ASYNC109 - a Playwright wait bound
        """The page the tools act on (a new blank one when there is none)."""
        if self.page is None or self.page.is_closed():
            open_pages = [p for p in self.context.pages if not p.is_closed()]
            self.page = open_pages[-1] if open_pages else await self.context.new_page()
            self.page.set_default_timeout(timeout * 1000)
        return self.page

    def opened(self, page: Page) -> None:
        """A new page (the tools' own, or a popup the site opened): it becomes the current one, unless the
        cap is hit. Its downloads are received into the workspace, or noted as refused (without a place,
        Playwright cancels them: ``accept_downloads=False``)."""
        page.on("download", self.download_started)
        if len([p for p in self.context.pages if not p.is_closed()]) > self.max_pages:
            self.closed_popups += 1
            closing = asyncio.ensure_future(page.close())
            self.closing.add(closing)
            closing.add_done_callback(self.closing.discard)
            return
        self.page = page

    def download_started(self, download: Download) -> None:
        if self.place is None:
            self.refused_downloads.append(download.suggested_filename)
            return
        receiving = asyncio.ensure_future(self._receive(download, self.place))
        self.downloading.add(receiving)
        receiving.add_done_callback(self.downloading.discard)

    async def _receive(self, download: Download, place: DownloadPlace) -> None:
        try:
            received = await receive(download, place)
        except Exception as error:  # the browser went away mid-download
            log.warning("browser: a download was lost: %s", error)
            received = Received("lost: the browser stopped before it finished")
        if self.witness is not None:
            try:
                await self.witness(download.url, received)
            except Exception:  # the audit's store is away: the file is saved all the same, and said so
                log.warning("browser: a download could not be put in the audit", exc_info=True)
        shown = " ".join(download.suggested_filename.split())[:100] or "a file"
        self.download_notes.append(
            mark_untrusted(download.url, f"The page started a download ({shown}): {received.said}.")
        )

    async def downloads_done(self, timeout: float) -> None:  # noqa: ASYNC109 - a bound, not a deadline
        """Wait up to ``timeout`` seconds for the downloads being received (a longer one is reported by
        a later action)."""
        if self.downloading:
            await asyncio.wait(set(self.downloading), timeout=timeout)

    async def popups_closed(self) -> None:
        """Wait until the pages closed for the cap are gone (a page that would not close is left be)."""
        if self.closing:
            await asyncio.gather(*self.closing, return_exceptions=True)

    def take_notes(self) -> list[str]:
        """What the model should hear about since the last action: refused connections, closed popups."""
        notes = [f"Refused {url}: {why}." for url, why in self.tenant.take_refused()]
        if self.closed_popups:
            notes.append(
                f"{self.closed_popups} page(s) the site opened were closed: a session may have "
                f"{self.max_pages} open (web.browser.max_pages)."
            )
            self.closed_popups = 0
        for name in self.refused_downloads:
            shown = " ".join(name.split())[:100] or "a file"
            notes.append(
                f"The page started a download ({shown}): refused, downloads are saved only into the "
                "owner's workspace (the files or terminal tool set)."
            )
        self.refused_downloads.clear()
        notes += self.download_notes
        self.download_notes.clear()
        return notes


class BrowserHost:
    """The process's Chromium and the sessions' contexts."""

    def __init__(self, settings: BrowserSettings, proxy: GuardedProxy | None = None) -> None:
        self.settings = settings
        self._proxy = proxy  # made with the browser (httpx and Playwright are loaded then)
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._sessions: dict[str, SessionBrowser] = {}
        self._launching = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    @property
    def proxy(self) -> GuardedProxy | None:
        """The guarded proxy every context connects through (None until the browser first starts)."""
        return self._proxy

    async def session(
        self,
        session_id: str,
        policy: AddressPolicy,
        place: DownloadPlace | None = None,
        witness: Witness | None = None,
    ) -> SessionBrowser:
        """The session's context, the browser launched and the context made if needed; ``place``: where
        its downloads go (None: refused), ``witness``: who records them; fixed when the context is made."""
        existing = self._sessions.get(session_id)
        if existing is not None:
            existing.last_used = asyncio.get_running_loop().time()
            return existing
        browser, proxy = await self._browser_started()
        credentials, tenant = proxy.admit(policy)
        try:
            context = await browser.new_context(
                proxy={
                    "server": proxy.url,
                    "username": credentials.username,
                    "password": credentials.password,
                },
                service_workers="block",
                accept_downloads=place is not None,
                viewport=VIEWPORT,  # type: ignore[arg-type]
            )
        except BaseException:
            proxy.dismiss(credentials)
            raise
        context.set_default_timeout(self.settings.timeout * 1000)
        context.set_default_navigation_timeout(self.settings.timeout * 1000)
        opened = SessionBrowser(
            context, credentials, tenant, self.settings.max_pages, place=place, witness=witness
        )
        opened.last_used = asyncio.get_running_loop().time()
        context.on("page", opened.opened)
        self._sessions[session_id] = opened
        return opened

    async def _browser_started(self) -> tuple[Browser, GuardedProxy]:
        async with self._launching:
            if self._browser is not None and self._browser.is_connected() and self._proxy is not None:
                return self._browser, self._proxy
            reason = missing(self.settings)
            if reason is not None:
                raise BrowserUnavailable(f"The browser is not available here: {reason}.")
            from playwright.async_api import async_playwright

            from agent.tools.browser.proxy import GuardedProxy

            try:
                async with asyncio.timeout(LAUNCH_TIMEOUT):
                    if self._proxy is None:
                        self._proxy = GuardedProxy()
                        await self._proxy.start()
                    if self._playwright is None:
                        self._playwright = await async_playwright().start()
                    self._browser = await self._playwright.chromium.launch(
                        executable_path=str(self.settings.executable),
                        args=list(CHROMIUM_ARGS),
                        timeout=LAUNCH_TIMEOUT * 1000,
                    )
            except Exception as error:
                log.warning("browser: Chromium did not start: %s", error)
                raise BrowserUnavailable(
                    "The browser could not be started (Chromium failed to launch); the details are in "
                    "Herald's log."
                ) from None
            if self._reaper is None:
                self._reaper = asyncio.ensure_future(self._close_idle())
            return self._browser, self._proxy

    async def close_session(self, session_id: str) -> None:
        """Close the session's context (its pages, cookies and storage go with it)."""
        opened = self._sessions.pop(session_id, None)
        if opened is None:
            return
        if self._proxy is not None:
            self._proxy.dismiss(opened.credentials)
        with contextlib.suppress(Exception):  # the browser may be gone already
            async with asyncio.timeout(self.settings.timeout):
                await opened.context.close()
        for receiving in list(opened.downloading):  # closing the context cancelled their downloads
            receiving.cancel()
        await asyncio.gather(*opened.downloading, return_exceptions=True)

    async def _close_idle(self) -> None:
        interval = min(self.settings.idle_timeout / 2, 30.0)
        while True:
            await asyncio.sleep(interval)
            await self.close_idle(asyncio.get_running_loop().time())

    async def close_idle(self, now: float) -> int:
        """Close the contexts unused for ``web.browser.idle_timeout`` at ``now`` (the loop's clock); how
        many were closed."""
        closed = 0
        for session_id, opened in list(self._sessions.items()):
            idle = not opened.lock.locked() and not opened.downloading
            if idle and now - opened.last_used >= self.settings.idle_timeout:
                log.info("browser: closing the context of session %s after it sat idle", session_id)
                await self.close_session(session_id)
                closed += 1
        return closed

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for session_id in list(self._sessions):
            await self.close_session(session_id)
        closing: list[Any] = []
        if self._browser is not None:
            closing.append(self._browser.close())
        for step in closing:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.timeout):
                    await step
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
        if self._proxy is not None:
            await self._proxy.aclose()
