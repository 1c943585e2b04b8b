"""A real headless browser for the console's tests: Debian's Chromium driven by Playwright (no browser
download: ``executable_path``), offline. A test that fails leaves a screenshot of the page it was on in
:data:`ARTIFACTS` (``$HERALD_TEST_ARTIFACTS``, default ``<tmp>/herald-artifacts``)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import Browser, Dialog, Page, async_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
ARTIFACTS = Path(os.environ.get("HERALD_TEST_ARTIFACTS") or Path(tempfile.gettempdir(), "herald-artifacts"))
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@dataclass
class Watched:
    """A page, with the script errors and dialogs (``alert``...) that happened on it."""

    page: Page
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    dismissing: set[asyncio.Future[None]] = field(default_factory=set)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 - once, before the browser starts
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/test installs it)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()


async def watched_page(browser: Browser, viewport: dict[str, int] = DESKTOP) -> Watched:
    context = await browser.new_context(viewport=viewport)  # type: ignore[arg-type]
    context.set_default_timeout(15_000)
    page = await context.new_page()
    watched = Watched(page)
    page.on("pageerror", lambda error: watched.errors.append(str(error)))

    def dialog(opened: Dialog) -> None:
        watched.dialogs.append(opened.message)
        watched.dismissing.add(dismissing := asyncio.ensure_future(opened.dismiss()))
        dismissing.add_done_callback(watched.dismissing.discard)

    page.on("dialog", dialog)
    return watched


async def screenshot_if_failed(request: pytest.FixtureRequest, page: Page) -> None:
    """In a fixture's teardown: save what the page shows when the test failed."""
    report = getattr(request.node, "report_call", None)
    if report is not None and not report.failed:
        return
    await asyncio.to_thread(ARTIFACTS.mkdir, parents=True, exist_ok=True)
    path = ARTIFACTS / f"{request.node.name.replace('/', '_')}.png"
    try:
        await page.screenshot(path=str(path), full_page=True)
    except Exception as error:  # the page may be gone with the failure: say so, keep the real failure
        print(f"no screenshot of {request.node.name}: {error}")
        return
    print(f"screenshot of the failed browser test: {path}")


