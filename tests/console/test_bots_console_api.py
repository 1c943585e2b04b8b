"""The console and the OpenAI-compatible API with several bots (``bots:``): one console with a page set per
bot, and API keys that each name their bot, nothing crossing between the bots.

Real python-telegram-bot against one fake Bot API per bot, the real anthropic SDK against the emulator,
the real ``openai`` SDK as the API's client, aiohttp as the console's browser.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from zoneinfo import ZoneInfo

import openai
import pytest

from agent.api import SessionRecord
from gateway.app import BotGateway
from gateway.budgets.limits import BOT
from gateway.budgets.lines import usd
from gateway.config import ConfigError, validate
from gateway.home import HeraldHome
from gateway.openai_api.server import PREFIX as API_PREFIX
from tests.bots_support import BotsHarness, requests_with, two_bots
from tests.console_support import CONSOLE_TOKEN, CSRF, console_client
from tests.emulator import ProviderEmulator
from tests.gateway_support import ADMIN, FRIEND

LINK = re.compile(r"http://\S+(/console/login\?link=\S+)")
BOT_ROW = r'<tr data-bot="{bot}".*?data-window="day">\s*<div class="spent">([^<]+)</div>'
KEYS = {"family": "family-key-0123456789abcdef", "work": "work-key-0123456789abcdef"}


async def bot_spent_today(bot: BotGateway) -> float:
    """What the bot spent today, as ``/budget`` reads it from its own database."""
    book = bot.services.budgets.book
    [(today, _)] = await book.of_scopes([book.scope(BOT, "")])
    return today.spent


def bots_row(page: str, bot: str) -> str:
    """The overview's "today" figure of ``bot`` in its table of bots."""
    found = re.search(BOT_ROW.format(bot=bot), page, re.DOTALL)
    assert found, f"no row for bot {bot}"
    return found.group(1)


@pytest.mark.slow
async def test_one_console_shows_each_bots_own_chats_and_spend_and_switches_between_them(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """FRIEND talks to the family bot twice, ADMIN to the work bot once. Logged in with the token, each
    bot's pages list only its own chat (the other bot's chat is a 404 there), the overview puts both bots'
    spend of today side by side (each as its own database says), every page has the switcher, whose links
    keep the page; a page's path without a bot (/console/chats) leads to the first bot's; a name that
    is no bot is a 404 page that shows the name as text. A login made by the work bot's /console link
    sees the work bot only."""
    environ = {"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}
    async with two_bots(home, emulator, emulator_url, environ=environ) as harness:
        harness.fakes["family"].private_message(FRIEND, "grandma visits on sunday")
        harness.fakes["work"].private_message(ADMIN, "the quarterly report is due")
        await harness.settled()
        harness.fakes["family"].private_message(FRIEND, "and she brings the cake")
        await harness.settled()
        family, work = harness.gateway.bot("family"), harness.gateway.bot("work")
        spent = {"family": await bot_spent_today(family), "work": await bot_spent_today(work)}
        url = harness.gateway.http.url
        async with console_client(url) as client:
            await client.login()
            status, _, response = await client.get("/console/")
            first = response.headers.get("Location")
            unbotted = {  # the pages' paths without a bot (bookmarks from before bots:)
                path: (await client.get(path))[2].headers.get("Location")
                for path in ("/console/chats", "/console/budgets", f"/console/chat?key=telegram:dm:{FRIEND}")
            }
            _, family_chats, _ = await client.get("/console/bots/family/chats")
            _, work_chats, _ = await client.get("/console/bots/work/chats")
            crossed, _, _ = await client.get(f"/console/bots/work/chat?key=telegram:dm:{FRIEND}")
            own, _, _ = await client.get(f"/console/bots/family/chat?key=telegram:dm:{FRIEND}")
            _, overview, _ = await client.get("/console/bots/work/")
            unknown, hostile, _ = await client.get("/console/bots/%3Cimg%20src=x%3E/chats")
        links = await scoped_login(harness, url)

    assert status == 303 and first == "/console/bots/family/"
    assert unbotted == {
        "/console/chats": "/console/bots/family/chats",
        "/console/budgets": "/console/bots/family/budgets",
        f"/console/chat?key=telegram:dm:{FRIEND}": f"/console/bots/family/chat?key=telegram:dm:{FRIEND}",
    }
    assert f"telegram:dm:{FRIEND}" in family_chats and f"telegram:dm:{ADMIN}" not in family_chats
    assert f"telegram:dm:{ADMIN}" in work_chats and f"telegram:dm:{FRIEND}" not in work_chats
    assert (crossed, own) == (404, 200)
    switcher = '<a href="/console/bots/work/chats" data-bot="work">work</a>'
    assert switcher in family_chats and 'href="/console/bots/family/chats" data-bot="family"' in work_chats
    assert 'href="/console/bots/family/chat?key=' in family_chats  # the chats' links keep the bot
    assert spent["family"] > 0 and spent["work"] > 0 and usd(spent["family"]) != usd(spent["work"])
    assert [bots_row(overview, bot) for bot in spent] == [usd(spent["family"]), usd(spent["work"])]
    assert "Overview of work" in overview
    assert unknown == 404 and "There is no bot called &lt;img src=x&gt;" in hostile and "<img" not in hostile
    assert links == {
        "/console/": "/console/bots/work/", "/console/chats": "/console/bots/work/chats",
        "family": 403, "work": 200, "switcher": ["work"],
    }  # fmt: skip


async def test_each_bots_pages_show_times_in_that_bots_timezone(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The work bot keeps Kathmandu's time (UTC+05:45), the family bot UTC's: each chat page dates its
    sessions in its own bot's zone (before, every bot's pages used the first bot's)."""
    zones = {"family": "UTC", "work": "Asia/Kathmandu"}
    bots = {name: {"settings": {"scheduler": {"timezone": zone}}} for name, zone in zones.items()}
    environ = {"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}
    async with two_bots(home, emulator, emulator_url, bots=bots, environ=environ) as harness:
        harness.fakes["family"].private_message(FRIEND, "grandma visits on sunday")
        harness.fakes["work"].private_message(FRIEND, "the quarterly report is due")
        await harness.settled()
        started = {}
        for name in zones:
            [session] = await harness.gateway.bot(name).services.runtime.store.sessions.recent()
            started[name] = session.created_at
        async with console_client(harness.gateway.http.url) as client:
            await client.login()
            pages = {
                name: (await client.get(f"/console/bots/{name}/chat?key=telegram:dm:{FRIEND}"))[1]
                for name in zones
            }
    for name, zone in zones.items():
        shown = dt.datetime.fromtimestamp(started[name], ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M")
        in_utc = dt.datetime.fromtimestamp(started[name], dt.UTC).strftime("%Y-%m-%d %H:%M")
        assert f"<td>{shown}</td>" in pages[name], name
        assert name == "family" or f"<td>{in_utc}</td>" not in pages[name]


async def scoped_login(harness: BotsHarness, url: str) -> dict[str, object]:
    """Log in with the work bot's /console link; where it leads and what it may see."""
    harness.fakes["work"].private_message(ADMIN, "/console")
    await harness.settled()
    found = LINK.search(harness.texts("work", ADMIN)[-1])
    assert found, harness.texts("work", ADMIN)
    async with console_client(url) as browser:
        _, page, _ = await browser.get(found.group(1))
        secret = found.group(1).rpartition("=")[2]
        form = {"csrf": CSRF.search(page).group(1), "link": secret}  # type: ignore[union-attr]
        status, _, _ = await browser.post("/console/login", form)
        assert status == 303
        _, _, start = await browser.get("/console/")
        _, _, chats = await browser.get("/console/chats")
        family, _, _ = await browser.get("/console/bots/family/chats")
        work, page, _ = await browser.get("/console/bots/work/chats")
    return {
        "/console/": start.headers.get("Location"),
        "/console/chats": chats.headers.get("Location"),
        "family": family,
        "work": work,
        "switcher": re.findall(r'data-bot="(\w+)"', page),
    }


async def api_sessions(bot: BotGateway) -> list[SessionRecord]:
    return [s for s in await bot.services.runtime.store.sessions.recent(100) if s.platform == "api"]


@pytest.mark.slow
async def test_each_api_key_talks_to_its_own_bot_and_nothing_crosses(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Alice has a key for each bot. Through the openai SDK, a two-turn conversation with each: each is
    one session in its bot's own database, sent with its bot's SOUL.md and model, and neither bot's
    requests carry what was said to the other. /v1/models names the key's bot; a wrong key is a 401."""
    for bot in KEYS:
        (home.root / "bots" / bot).mkdir(parents=True)
        (home.root / "bots" / bot / "SOUL.md").write_text(f"You are the {bot} assistant.\n")
    keys = [{"key": f"${bot.upper()}_API_KEY", "person": "api:alice", "bot": bot} for bot in KEYS]
    profiles = {"family": {"settings": {"model": {"name": "claude-haiku-4-5"}}}}
    environ = {f"{bot.upper()}_API_KEY": key for bot, key in KEYS.items()}
    said = {"family": "grandma visits on sunday", "work": "the quarterly report is due"}
    api = {"keys": keys}
    async with two_bots(home, emulator, emulator_url, bots=profiles, environ=environ, api=api) as h:
        base_url = h.gateway.http.url + API_PREFIX
        owners = {}
        for bot, key in KEYS.items():
            options: dict[str, Any] = {"max_retries": 0, "timeout": 30.0}
            async with openai.AsyncOpenAI(base_url=base_url, api_key=key, **options) as client:
                messages: list[dict[str, str]] = [{"role": "user", "content": said[bot]}]
                first = await client.chat.completions.create(model="herald", messages=messages)  # type: ignore[arg-type]
                messages += [
                    {"role": "assistant", "content": first.choices[0].message.content or ""},
                    {"role": "user", "content": f"what did I tell the {bot} bot?"},
                ]
                await client.chat.completions.create(model="herald", messages=messages)  # type: ignore[arg-type]
                owners[bot] = [model.owned_by async for model in client.models.list()]
        wrong_key = "not-a-key-0123456789"
        async with openai.AsyncOpenAI(base_url=base_url, api_key=wrong_key, max_retries=0) as wrong:
            with pytest.raises(openai.AuthenticationError):
                hello: list[Any] = [{"role": "user", "content": "hi"}]
                await wrong.chat.completions.create(model="herald", messages=hello)
        sessions = {bot: await api_sessions(h.gateway.bot(bot)) for bot in KEYS}

    assert owners == {"family": ["family"], "work": ["work"]}
    for bot, other in (("family", "work"), ("work", "family")):
        [session] = sessions[bot]  # the second turn continued the first's session, in the bot's database
        assert session.user_id == "alice"
        turns = requests_with(emulator, f"what did I tell the {bot} bot?")
        assert turns and all(said[bot] in t.body.decode() for t in turns)
        bodies = [t.body.decode() for t in requests_with(emulator, said[bot])]
        assert all(f"You are the {bot} assistant." in body for body in bodies)
        assert not [body for body in bodies if f"the {other} assistant." in body or said[other] in body]
    assert {t.model for t in requests_with(emulator, said["family"])} == {"claude-haiku-4-5"}
    assert {t.model for t in requests_with(emulator, said["work"])} == {"claude-sonnet-4-6"}


@pytest.mark.parametrize(
    ("keys", "bots", "problem"),
    [
        (
            [{"key": "$K", "person": "api:alice"}],
            {"family": {}},
            "api.keys[0] (api:alice): with bots:, each key says which bot it talks to: add bot: (one of "
            "family)",
        ),
        (
            [{"key": "$K", "person": "api:alice", "bot": "famly"}],
            {"family": {}},
            "api.keys[0] (api:alice): names bot famly, which is not in bots: (bots: family)",
        ),
        (
            [{"key": "$K", "person": "api:alice", "bot": "family"}],
            {},
            "api.keys[0] (api:alice): names bot family but there is no bots: section",
        ),
    ],
)
def test_a_key_that_names_no_bot_or_an_unknown_one_is_a_config_error_that_says_what_to_fix(
    keys: list[dict[str, str]], bots: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        validate({"api": {"keys": keys}, "bots": bots}, "config.yaml")
    assert problem in str(refused.value)


def test_a_bots_configuration_carries_only_the_keys_that_talk_to_it() -> None:
    """Each bot's access rules let in the API people of its own keys only (``api:NAME`` people)."""
    keys = [
        {"key": "$A", "person": "api:alice", "bot": "family"},
        {"key": "$B", "person": "api:alice", "bot": "work"},  # one person, a key per bot: one label each
        {"key": "$C", "person": "api:bob", "bot": "work", "name": "bob-laptop"},
    ]
    config = validate({"api": {"keys": keys}, "bots": {"family": {}, "work": {}}}, "config.yaml")
    assert [(k.person, k.bot) for k in config.bot("family").api.keys] == [("api:alice", None)]
    assert [k.label for k in config.bot("work").api.keys] == ["api:alice", "bob-laptop"]
