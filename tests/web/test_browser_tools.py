"""The browser tools driving Debian's Chromium against a local site (tests/fakes/site.py): forms, a
login, a list a script renders, and every way a page could reach another address — a redirect, its own
fetch and WebSocket, a link typed in — stopped by web_fetch's address rule.

The site is on 127.0.0.1, which the real rule refuses: the tools get the real rule with exactly the
site's address and port let through (``PublicServer``, a test-only policy no setting can make). The
second server on another loopback port stands for the owner's network; ``private.hits`` staying empty
proves nothing reached it. One Chromium serves the whole module (it takes seconds to start). The owner's
downloads go into a workspace of the module's, as the hands' would.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from itertools import count
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from agent.hands.downloads import WorkspaceDownloads
from agent.hands.file_pool import FilePool
from agent.hands.paths import Confinement
from agent.memory import OWNER_SCOPE
from agent.model.messages import Message, ToolCall
from agent.providers.openai_provider import OpenAIProvider
from agent.settings import WebSettings
from agent.store.audit import Outcome
from agent.tools.browser import BrowserTools
from agent.tools.browser.host import SessionBrowser
from agent.tools.registry import ToolContext, ToolRegistry, run_tool
from agent.tools.web.addresses import guest_policy, owner_policy
from tests.fakes.site import CHECKLIST, HOSTILE_NAMES, ITEMS, PASSWORD, Site
from tests.fakes.web import PublicServer
from tests.helpers import open_store
from tests.state_support import files_bank, files_library
from tests.web_support import UNCHARGED

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

_sessions = count(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site() -> AsyncIterator[Site]:
    async with Site().serve() as served:
        yield served


@pytest.fixture(scope="module")
def pool() -> Iterator[FilePool]:
    threads = FilePool()
    yield threads
    threads.close()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workspace")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(site: Site, workspace: Path, pool: FilePool) -> AsyncIterator[BrowserTools]:
    settings = WebSettings.model_validate(
        {"browser": {"max_pages": 2, "max_snapshot_chars": 4000, "max_download_mb": 1}}
    )
    cap = settings.browser.max_download_mb * 2**20
    place = WorkspaceDownloads(Confinement.of(workspace), pool, cap, None)
    tools = BrowserTools(settings, owner=PublicServer(owner_policy(False), site.inside.port), downloads=place)
    yield tools
    await tools.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    root = tmp_path_factory.mktemp("browser")
    async with open_store(root / "state.db") as opened:
        yield opened, root


@pytest.fixture
def context(store: Any) -> ToolContext:
    """An owner's context in a session of its own (its own browser context: no cookies from other tests)."""
    opened, root = store
    memory = files_bank(Path(root) / "memories", 2000, 1000).store(OWNER_SCOPE)
    return ToolContext(
        f"session-{next(_sessions)}",
        "telegram:1",
        opened,
        memory,
        files_library(root / "skills"),
        UNCHARGED,
        trusted=True,
    )


async def call(tools: BrowserTools, context: ToolContext, name: str, **args: Any) -> Message:
    """One tool call as the agent loop makes it."""
    registry = ToolRegistry(tools.tools)
    allowed = {tool.name for tool in tools.tools}
    return await run_tool(registry, ToolCall("call-1", name, json.dumps(args)), context, allowed)


def ref(result: Message, line: str) -> str:
    """The ref of the snapshot line that starts with ``line`` (``textbox "Your name"``)."""
    found = re.search(rf"- {re.escape(line)}.*?\[ref=([a-z0-9]+)\]", result.content)
    assert found is not None, f"no {line} in:\n{result.content}"
    return found.group(1)


async def test_a_form_is_filled_chosen_and_sent(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    opened = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/form")
    assert not opened.is_error, opened.content
    assert opened.content.startswith(f"Page: {site.inside.url}/form — Order a bird book\n")
    assert f'<untrusted source="{site.inside.url}/form">' in opened.content
    await call(browser, context, "browser_type", ref=ref(opened, 'textbox "Your name"'), text="Ada")
    chosen = await call(
        browser, context, "browser_select", ref=ref(opened, 'combobox "Edition"'), values=["Hardback"]
    )
    assert 'option "Hardback" [selected]' in chosen.content
    sent = await call(browser, context, "browser_click", ref=ref(opened, 'button "Order"'))
    assert "Thank you, Ada: one hardback is on its way." in sent.content


async def test_a_login_keeps_its_cookie_in_the_session_and_no_other(
    browser: BrowserTools, site: Site, context: ToolContext, store: Any
) -> None:
    login = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/login")
    await call(browser, context, "browser_type", ref=ref(login, 'textbox "User name"'), text="alice")
    signed_in = await call(
        browser, context, "browser_type", ref=ref(login, 'textbox "Password"'), text=PASSWORD, submit=True
    )
    assert "Welcome back, alice" in signed_in.content
    again = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/account")
    assert "Welcome back, alice" in again.content  # the cookie stayed

    other = ToolContext(
        "another-chat", "telegram:2", context.store, context.memory, context.skills, UNCHARGED, trusted=True
    )
    stranger = await call(browser, other, "browser_navigate", url=f"{site.inside.url}/account")
    assert stranger.content.startswith(f"Page: {site.inside.url}/login — Sign in")  # no cookie there


async def test_a_list_a_script_renders_is_read_once_it_appears(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    await call(browser, context, "browser_navigate", url=f"{site.inside.url}/list")
    waited = await call(browser, context, "browser_wait_for", text="3 sightings loaded")
    assert '"3 sightings loaded" is on the page.' in waited.content
    assert [f"{name} seen today" in waited.content for name in ITEMS] == [True] * len(ITEMS)


async def test_a_redirect_to_another_loopback_port_is_refused_and_reaches_nothing(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    result = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/escape")
    assert (
        f"Refused {site.private.url}/admin: 127.0.0.1 is a loopback address (web.allow_private is off)."
        in result.content
    )
    assert "router admin page" not in result.content
    assert "/admin" not in site.private.hits


async def test_a_pages_own_fetch_and_websocket_to_a_private_address_are_stopped(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    await call(browser, context, "browser_navigate", url=f"{site.inside.url}/sneaky")
    result = await call(browser, context, "browser_wait_for", text="socket was stopped")
    assert "fetch was stopped" in result.content
    assert "socket opened" not in result.content
    assert "/steal" not in site.private.hits and "/socket" not in site.private.hits


async def test_private_and_metadata_addresses_and_other_schemes_are_refused(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    metadata = await call(
        browser, context, "browser_navigate", url="http://169.254.169.254/latest/meta-data/"
    )
    assert metadata.is_error and metadata.content == (
        "Refused http://169.254.169.254/latest/meta-data/: 169.254.169.254 is a link-local address "
        "(web.allow_private is off)."
    )
    local = await call(browser, context, "browser_navigate", url=f"{site.private.url}/")
    assert local.is_error
    assert (
        local.content
        == f"Refused {site.private.url}/: 127.0.0.1 is a loopback address (web.allow_private is off)."
    )
    file = await call(browser, context, "browser_navigate", url="file:///etc/passwd")
    assert (
        file.is_error
        and file.content == "Refused file:///etc/passwd: only http and https URLs are fetched, not file ones."
    )
    assert "/" not in site.private.hits


async def test_a_huge_page_is_cut_with_a_sentence_and_read_part_by_part(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    first = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/big")
    said = re.search(
        r"Lines 1-(\d+) of the page's ([\d,]+) are shown \(web.browser.max_snapshot_chars\); "
        r"browser_snapshot with start=(\d+) shows the next part.",
        first.content,
    )
    assert said is not None, first.content
    shown, total, start = int(said[1]), int(said[2].replace(",", "")), int(said[3])
    assert start == shown + 1 and total > shown
    assert len(first.content) < 6000  # 4000 characters of snapshot, the envelope and the lines around it
    assert 'link "Row 0"' in first.content and 'link "Row 2999"' not in first.content

    second = await call(browser, context, "browser_snapshot", start=start)
    assert f"Lines {start:,}-" in second.content and 'link "Row 0"' not in second.content
    last = await call(browser, context, "browser_snapshot", start=total - 2)
    assert (
        f"Lines {total - 2:,}-{total:,} of the page's {total:,} are shown (web.browser.max_snapshot_chars)."
        in last.content
    )
    assert "/url: /row/2999" in last.content


async def test_a_screenshot_comes_back_as_an_image(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    await call(browser, context, "browser_navigate", url=f"{site.inside.url}/form")
    shot = await call(browser, context, "browser_screenshot")
    assert shot.content == f"Screenshot of {site.inside.url}/form (1280×800)."
    [image] = shot.media
    assert (image.kind, image.media_type, image.width, image.height) == ("image", "image/jpeg", 1280, 800)
    assert image.data.startswith(b"\xff\xd8")  # a JPEG
    # Chat Completions takes no image in a tool result: the model is told there was one it cannot see.
    chat = OpenAIProvider(model="gpt-5", api_key="unused", base_url=None, timeout=5).wire_message(shot)
    assert chat["content"] == (
        f"Screenshot of {site.inside.url}/form (1280×800).\n"
        "[image: screenshot] (not shown: this API takes images in tool results only from Anthropic)"
    )


async def test_pages_beyond_the_cap_are_closed_and_the_model_told(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    opened = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/popups")
    result = await call(browser, context, "browser_click", ref=ref(opened, 'button "Open four"'))
    session = await browser.host.session(context.session_id, owner_policy(False))
    if "page(s) the site opened were closed" not in result.content:  # they opened after the click's answer
        async with asyncio.timeout(30):
            while not session.closed_popups:  # noqa: ASYNC110 - set by a Playwright event
                await asyncio.sleep(0.05)
        result = await call(browser, context, "browser_snapshot")
    assert (
        "page(s) the site opened were closed: a session may have 2 open (web.browser.max_pages)."
        in result.content
    )
    assert len([page for page in session.context.pages if not page.is_closed()]) <= 2


async def test_an_idle_session_loses_its_browser_and_a_stale_ref_is_a_clear_error(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    opened = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/form")
    button = ref(opened, 'button "Order"')
    session = await browser.host.session(context.session_id, owner_policy(False))
    assert await browser.host.close_idle(session.last_used + browser.settings.idle_timeout) >= 1
    stale = await call(browser, context, "browser_click", ref=button)  # a fresh, blank page now
    assert stale.is_error
    assert stale.content == f"{button} is not on the page any more: take a new snapshot and use its refs."


async def download(tools: BrowserTools, context: ToolContext, site: Site, link: str) -> str:
    """Click the download page's ``link``; what the model is told of the download (from the click's
    answer, or the next one's when the download ended after it)."""
    opened = await call(tools, context, "browser_navigate", url=f"{site.inside.url}/download")
    told = await call(tools, context, "browser_click", ref=ref(opened, f'link "{link}"'))
    if "started a download" not in told.content:
        session = await session_of(tools, context)
        async with asyncio.timeout(30):
            while not (session.download_notes or session.refused_downloads):  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # waiting for a state: the download received or refused
        told = await call(tools, context, "browser_snapshot")
    return told.content


async def session_of(tools: BrowserTools, context: ToolContext) -> SessionBrowser:
    return await tools.host.session(context.session_id, owner_policy(False))


def files_in(folder: Path) -> list[str]:
    """Every file under ``folder``, relative to it."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if not path.is_dir())


async def test_a_download_is_saved_into_the_workspace_bytes_intact_and_never_over_another(
    browser: BrowserTools, site: Site, context: ToolContext, workspace: Path
) -> None:
    first = await download(browser, context, site, "Get the checklist")
    assert re.search(
        r'<untrusted source="http://127\.0\.0\.1:\d+/file">\n.*\n'
        rf"The page started a download \(checklist\.csv\): saved to downloads/checklist\.csv in the "
        rf"workspace \({len(CHECKLIST)} bytes\)\.",
        first,
    ), first
    again = await download(browser, context, site, "Get the checklist")
    assert "saved to downloads/checklist-2.csv in the workspace" in again
    by_url = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/file")
    assert f"{site.inside.url}/file is a file to download, not a page." in by_url.content
    if "checklist-3.csv" not in by_url.content:  # the download ended after the answer: the next one says
        session = await session_of(browser, context)
        async with asyncio.timeout(30):
            while not session.download_notes:  # noqa: ASYNC110 - set when the download is received
                await asyncio.sleep(0.05)
    assert [
        (workspace / "downloads" / name).read_bytes()
        for name in ("checklist.csv", "checklist-2.csv", "checklist-3.csv")
    ] == [CHECKLIST] * 3


async def test_a_hostile_file_name_lands_as_a_safe_name_in_the_downloads_folder(
    browser: BrowserTools, site: Site, context: ToolContext, workspace: Path
) -> None:
    before = set(files_in(workspace))
    for number in range(len(HOSTILE_NAMES)):
        told = await download(browser, context, site, f"Named {number}")
        assert "saved to downloads/" in told, told
    landed = sorted(set(files_in(workspace)) - before)
    assert len(landed) == len(HOSTILE_NAMES)
    for path in landed:
        folder, name = path.split("/")
        assert folder == "downloads" and not name.startswith(".") and name.isprintable() and " " not in name
        assert (workspace / path).read_bytes() == CHECKLIST


async def test_a_download_over_the_cap_is_stopped_and_nothing_is_left(
    browser: BrowserTools, site: Site, context: ToolContext, workspace: Path
) -> None:
    told = await download(browser, context, site, "Get the atlas")
    assert (
        "The page started a download (atlas.bin): refused: it is over 1 MB (web.browser.max_download_mb); "
        "nothing was saved." in told
    )
    async with asyncio.timeout(30):
        await site.huge_cut.wait()  # stopped part-way, not received whole and refused after
    assert not [path for path in files_in(workspace) if "atlas" in path]


async def test_each_download_is_in_the_audit_with_its_address_its_file_and_its_size(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    """The console's Activity shows what a page downloaded into the workspace, like every other thing
    the owner's tools did: the session, the address, the file and its size; a refused one with why."""
    await download(browser, context, site, "Get the checklist")
    await download(browser, context, site, "Get the atlas")
    rows = await context.store.audit.entries(session_key=context.session_key, tool="browser_download")
    atlas, checklist = [row for row in rows if row.session_id == context.session_id]  # newest first
    assert (checklist.action, checklist.outcome) == (f"download {site.inside.url}/file", Outcome.RAN)
    assert checklist.detail.startswith("saved to downloads/checklist")
    assert f"({len(CHECKLIST)} bytes)" in checklist.detail
    assert (atlas.action, atlas.outcome) == (f"download {site.inside.url}/huge", Outcome.FAILED)
    assert "refused: it is over 1 MB" in atlas.detail


async def test_a_download_redirected_to_a_private_address_is_refused_and_reaches_nothing(
    browser: BrowserTools, site: Site, context: ToolContext, workspace: Path
) -> None:
    before = files_in(workspace)
    opened = await call(browser, context, "browser_navigate", url=f"{site.inside.url}/download")
    told = await call(browser, context, "browser_click", ref=ref(opened, 'link "Get the secret"'))
    assert (
        f"Refused {site.private.url}/secret.csv: 127.0.0.1 is a loopback address (web.allow_private is off)."
        in told.content
    )
    assert "/secret.csv" not in site.private.hits
    assert files_in(workspace) == before


async def test_without_a_workspace_a_download_is_refused_and_the_model_told(
    browser: BrowserTools, site: Site, context: ToolContext, workspace: Path
) -> None:
    before = files_in(workspace)
    no_hands = BrowserTools(
        WebSettings(), owner=PublicServer(owner_policy(False), site.inside.port), host=browser.host
    )
    told = await download(no_hands, context, site, "Get the checklist")
    assert (
        "The page started a download (checklist.csv): refused, downloads are saved only into the owner's "
        "workspace (the files or terminal tool set)." in told
    )
    assert files_in(workspace) == before


async def test_a_guests_download_is_refused_even_with_a_workspace(
    browser: BrowserTools, site: Site, context: ToolContext, workspace: Path
) -> None:
    before = files_in(workspace)
    guest_reaching_the_site = BrowserTools(
        WebSettings(),
        guest=PublicServer(guest_policy(False), site.inside.port),
        host=browser.host,
        downloads=browser.downloads,
    )
    guest = ToolContext(
        f"guest-{context.session_id}",
        "telegram:-100",
        context.store,
        context.memory,
        context.skills,
        UNCHARGED,
    )
    told = await download(guest_reaching_the_site, guest, site, "Get the checklist")
    assert "The page started a download (checklist.csv): refused, downloads are saved only into" in told
    assert files_in(workspace) == before


async def test_links_planted_in_the_workspace_are_not_followed(
    browser: BrowserTools, site: Site, context: ToolContext, tmp_path: Path, pool: FilePool
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "checklist.csv").write_bytes(b"the owner's own file\n")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "downloads").symlink_to(outside)  # downloads/ itself a link out
    linked = tmp_path / "linked"
    (linked / "downloads").mkdir(parents=True)
    (linked / "downloads" / "checklist.csv").symlink_to(outside / "checklist.csv")  # the file name a link out

    def tools(root: Path) -> BrowserTools:
        place = WorkspaceDownloads(Confinement.of(root), pool, 2**20, None)
        policy = PublicServer(owner_policy(False), site.inside.port)
        return BrowserTools(WebSettings(), owner=policy, host=browser.host, downloads=place)

    refused = await download(tools(planted), context, site, "Get the checklist")
    assert "refused: 'downloads' is not a folder any more" in refused, refused
    other = ToolContext(
        f"{context.session_id}-b",
        "telegram:1",
        context.store,
        context.memory,
        context.skills,
        UNCHARGED,
        trusted=True,
    )
    beside = await download(tools(linked), other, site, "Get the checklist")
    assert "saved to downloads/checklist-2.csv in the workspace" in beside, beside
    assert (outside / "checklist.csv").read_bytes() == b"the owner's own file\n"
    assert sorted(p.name for p in outside.iterdir()) == ["checklist.csv"]
    assert (linked / "downloads" / "checklist-2.csv").read_bytes() == CHECKLIST


async def test_the_workspace_quota_refuses_a_download_that_would_pass_it(
    browser: BrowserTools, site: Site, context: ToolContext, tmp_path: Path, pool: FilePool
) -> None:
    (tmp_path / "full.bin").write_bytes(b"\1" * 2**20)  # the quota's one MB, taken
    place = WorkspaceDownloads(Confinement.of(tmp_path), pool, 2**20, quota_mb=1)
    full = BrowserTools(
        WebSettings(),
        owner=PublicServer(owner_policy(False), site.inside.port),
        host=browser.host,
        downloads=place,
    )
    told = await download(full, context, site, "Get the checklist")
    assert (
        f"refused: its {len(CHECKLIST)} bytes would pass the workspace's quota of 1 MB "
        "(tools.workspace_quota_mb; 1.0 MB in use); nothing was saved." in told
    ), told
    assert files_in(tmp_path) == ["full.bin"]


async def test_the_guarded_proxy_serves_only_the_browsers_contexts(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    await call(browser, context, "browser_navigate", url=f"{site.inside.url}/")
    assert browser.host.proxy is not None
    async with httpx.AsyncClient(proxy=browser.host.proxy.url, trust_env=False) as other_program:
        answer = await other_program.get(f"{site.inside.url}/probe-from-another-program")
    assert answer.status_code == 407
    assert "/probe-from-another-program" not in site.inside.hits


async def test_with_private_addresses_on_the_owner_reaches_them_and_a_guest_never(
    browser: BrowserTools, site: Site, context: ToolContext
) -> None:
    allowing = BrowserTools(
        WebSettings(allow_private=True), host=browser.host
    )  # the real rule, same Chromium
    guest = ToolContext(
        f"guest-{context.session_id}",
        "telegram:-100",
        context.store,
        context.memory,
        context.skills,
        UNCHARGED,
    )
    owner = await call(allowing, context, "browser_navigate", url=f"{site.private.url}/router")
    refused = await call(allowing, guest, "browser_navigate", url=f"{site.private.url}/router")
    assert "the owner's router admin page" in owner.content
    assert refused.is_error and refused.content == (
        f"Refused {site.private.url}/router: 127.0.0.1 is a loopback address (private addresses are for the "
        "owner only)."
    )
    assert site.private.hits.count("/router") == 1  # the owner's visit only
