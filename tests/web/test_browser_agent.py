"""The browser tools in the agent loop: a scripted model (tests/browsing.py) signs in, orders a book and
reads a list a script renders on the local test site, then takes a screenshot; the real anthropic SDK
against the emulator, the real runtime (the tool set wired from ``agent.toolsets``), Debian's Chromium.

What matters to a user: the model acts on refs it read in the previous snapshot, the screenshot reaches
the model as an image inside the tool result, and at compression the old snapshots and the screenshot
leave the history for the marker other tool output gets.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.compression.boundaries import PRUNED_TOOL_OUTPUT
from gateway.doctor.browser import check_browser
from gateway.doctor.run import check_config, run_doctor
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.browsing import BrowsingModel, Step, ten_steps
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.site import CHECKLIST, Site
from tests.helpers import compress, new_session, run_turn

pytestmark = pytest.mark.timeout(180)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


async def test_a_model_browses_sees_a_screenshot_and_compression_clears_old_pages(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with Site().serve() as site:
        model = BrowsingModel([*ten_steps(site.inside.url), Step("browser_screenshot", {})])
        config = make_config(
            emulator_url,
            agent={"toolsets": ["web", "browser"]},
            web={"allow_private": True},  # the site is on 127.0.0.1: the owner's, with private addresses on
            compression={"protect_last_n": 2},
        )
        async with open_agent_runtime(config, home) as runtime:
            session = await new_session(runtime)
            emulator.script(Reply(text="Hello! What shall I look at?"))
            await run_turn(runtime, session, "hi")
            emulator.responder = model
            browsed = await run_turn(
                runtime, session, "Sign in as alice, order the hardback, read the sightings."
            )
            await run_turn(runtime, session, "thanks")
            await compress(runtime, session)
            await run_turn(runtime, session, "anything else?")

    assert browsed.text == model.answer
    assert "Welcome back, alice" in model.results[4]  # after typing the password and pressing Enter
    assert "Thank you, Alice: one hardback is on its way." in model.results[8]
    assert "Heron seen today" in model.results[10]  # the list the page's script rendered
    after_shot = next(
        r.json for r in emulator.requests if any(isinstance(b["content"], list) for b in tool_results(r.json))
    )
    [shot] = [b for b in tool_results(after_shot) if isinstance(b["content"], list)]
    text, image = shot["content"]
    assert text["text"].startswith(f"Screenshot of {site.inside.url}/list (1280×800).")
    assert image["type"] == "image" and image["source"]["media_type"] == "image/jpeg"

    last = emulator.requests[-1].json
    browser_results = tool_results(last)
    assert len(browser_results) == 11
    assert [b["content"] for b in browser_results] == [PRUNED_TOOL_OUTPUT] * 11
    assert "Welcome back" not in str(last)


async def doctor_says(home: HeraldHome, browser: dict[str, Any]) -> str:
    config = {"agent": {"toolsets": ["browser"]}, "web": {"browser": browser}}
    home.config_path.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    await run_doctor(home, offline=True, out=out, checks=[check_config, check_browser], environ={})
    return "".join(line for line in out.getvalue().splitlines(keepends=True) if " browser: " in line)


async def test_without_chromium_the_tools_and_doctor_say_what_to_install(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    nowhere = tmp_path / "no-chromium"
    missing = (
        f"Chromium is not installed at {nowhere} (apt-get install chromium, or set web.browser.executable)"
    )
    emulator.script(
        Reply(tool_calls=[ToolUse("browser_navigate", {"url": "https://example.com/"})]),
        Reply(text="No browser."),
    )
    config = make_config(
        emulator_url, agent={"toolsets": ["browser"]}, web={"browser": {"executable": str(nowhere)}}
    )
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "open example.com")
    [result] = tool_results(emulator.requests[-1].json)
    assert result["is_error"] and result["content"] == f"The browser is not available here: {missing}."

    assert await doctor_says(home, {"executable": str(nowhere)}) == (
        f"[FAIL] browser: {missing}; the browser tools answer with this error until then.\n"
    )
    assert await doctor_says(home, {}) == (
        "[ok]   browser: Chromium at /usr/bin/chromium and Playwright are installed.\n"
    )


async def test_with_the_files_tool_set_a_download_lands_in_the_workspace_the_file_tools_use(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    async with Site().serve() as site:
        emulator.script(
            Reply(tool_calls=[ToolUse("browser_navigate", {"url": f"{site.inside.url}/file"})]),
            Reply(text="Saved."),
        )
        config = make_config(
            emulator_url,
            agent={"toolsets": ["files", "browser"]},
            web={"allow_private": True},
            tools={"workspace": str(workspace)},
        )
        async with open_agent_runtime(config, home) as runtime:
            session = await new_session(runtime)
            await run_turn(runtime, session, "get the checklist")
            saved = workspace / "downloads" / "checklist.csv"
            async with asyncio.timeout(30):
                while not saved.exists():  # noqa: ASYNC110 - the download may end after the turn's answer
                    await asyncio.sleep(0.05)
    [result] = tool_results(emulator.requests[-1].json)
    assert f"{site.inside.url}/file is a file to download, not a page." in str(result["content"])
    assert saved.read_bytes() == CHECKLIST
