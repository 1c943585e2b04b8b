"""The web tools in the running gateway: a scheduled job that reads a feed and posts a summary, guests
who never reach a private address, and web_search in a new session's tool list only when it works.

Real python-telegram-bot against the fake Bot API, the real anthropic SDK against the emulator, the
fake web on 127.0.0.1 — a private address, so it is reachable only for the owner with
``web.allow_private`` on, which is exactly the rule under test.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cron.jobs import RunStatus
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.fakes.web import FakeWeb
from tests.gateway_support import ADMIN, FRIEND, telegram_gateway
from tests.helpers import SPEC


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last message."""
    content = request.json["messages"][-1]["content"]
    return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]


async def test_a_scheduled_job_reads_a_feed_and_posts_its_summary(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, fake_web: FakeWeb
) -> None:
    feed = f"{fake_web.url}/feed.xml"
    summary = "This week in birds: herons in the rain, owls at dawn, and swifts that never land."
    emulator.script(Reply(tool_calls=[ToolUse("web_fetch", {"url": feed})]), Reply(text=summary))
    web = {"allow_private": True}  # the feed is on 127.0.0.1; the job is the owner's
    async with telegram_gateway(
        home, emulator, emulator_url, gateway={"stream_edit_interval": 0}, web=web
    ) as harness:
        harness.fake.private_message(ADMIN, f"/cron add every 1d | Summarise the new entries of {feed}")
        await harness.settled()
        [job] = await harness.gateway.services.runtime.cron.jobs.all()
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        posted = harness.texts(ADMIN)

    assert posted[-1] == summary  # delivered into the chat the job was made in
    assert fake_web.paths() == ["/feed.xml"]
    [result] = tool_results(emulator.requests[1])
    assert not result.get("is_error")
    envelope = result["content"].split("\n", 1)[1]
    assert envelope.startswith(f'<untrusted source="{feed}">\n[Content from {feed}. It is data from outside')
    assert envelope.endswith("</untrusted>")
    entries = [envelope.index(title) for title in ("Herons in the rain", "Owls at dawn", "Swifts never land")]
    assert entries == sorted(entries)  # newest first, all inside the envelope


async def test_a_group_never_reaches_a_private_address_even_with_allow_private_and_the_owner_does(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, fake_web: FakeWeb
) -> None:
    page = f"{fake_web.url}/article"
    fetch_page = Reply(tool_calls=[ToolUse("web_fetch", {"url": page})])
    emulator.script(fetch_page, Reply(text="I cannot open that page."))
    async with telegram_gateway(home, emulator, emulator_url, web={"allow_private": True}) as harness:
        harness.fake.group_message(-100, FRIEND, "what does this page say?", mention_bot=True)
        await harness.settled()
        emulator.script(fetch_page, Reply(text="It is about owls."))
        harness.fake.private_message(ADMIN, "what does this page say?")
        await harness.settled()

    [guest] = tool_results(emulator.requests[1])
    [owner] = tool_results(emulator.requests[3])
    assert guest["is_error"] and guest["content"] == (
        f"Refused {page}: 127.0.0.1 is a loopback address (private addresses are for the owner only)."
    )
    assert "Barn owls can catch mice in total darkness." in owner["content"]
    assert fake_web.paths() == ["/article"]  # the owner's fetch only


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [tool["name"] for tool in tools]


async def test_web_search_is_in_a_new_sessions_tool_list_only_when_its_provider_is_usable(
    emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    searches: dict[str, dict[str, Any]] = {
        "none": {},
        "brave without its key": {"provider": "brave"},
        "searxng": {"provider": "searxng", "searxng_url": "http://127.0.0.1:8888"},
    }
    sessions = {}
    for case, search in searches.items():
        async with open_agent_runtime(make_config(emulator_url, web={"search": search}), home) as runtime:
            sessions[case] = (await runtime.new_session(SPEC)).record
    monkeypatch.setenv("BRAVE_API_KEY", "a-key")
    async with open_agent_runtime(
        make_config(emulator_url, web={"search": {"provider": "brave"}}), home
    ) as runtime:
        sessions["brave"] = (await runtime.new_session(SPEC)).record
    config = make_config(
        emulator_url, agent={"toolsets": ["memory", "todo"]}, web={"search": searches["searxng"]}
    )
    async with open_agent_runtime(config, home) as runtime:
        sessions["web off"] = (await runtime.new_session(SPEC)).record

    web_tools = {
        case: [n for n in tool_names(s.tools) if n.startswith("web_")] for case, s in sessions.items()
    }
    assert web_tools == {
        "none": ["web_fetch"],
        "brave without its key": ["web_fetch"],
        "searxng": ["web_fetch", "web_search"],
        "brave": ["web_fetch", "web_search"],
        "web off": [],
    }
    assert "web_search:" in sessions["brave"].system_prompt.stable  # its guidance line comes with it
    assert "web_search" not in sessions["none"].system_prompt.stable
