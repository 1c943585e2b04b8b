"""Several bots in one process (``bots:``): two Telegram bots on one gateway, nothing crossing between them.

Real python-telegram-bot against one fake Bot API per bot, the real anthropic SDK against the emulator.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.config import set_value
from gateway.cron.jobs import RunStatus
from gateway.doctor.platforms import check_platforms
from gateway.doctor.run import check_api_keys, check_config, run_doctor
from gateway.home import HeraldHome
from tests.bots_support import TOKENS, requests_with, two_bots
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes import FakeTelegram
from tests.gateway_support import ADMIN, FRIEND
from tests.helpers import herald_cli, point_at
from tests.postgres import free_port
from tests.state_support import skill_md


async def http_get(url: str) -> str:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as client, client.get(url) as got:
        return await got.text()


def answered(replies: list[str], *messages: str) -> bool:
    """Whether ``replies`` are the emulator's answers ("Emulated reply N to: TEXT...") to ``messages``."""
    said = [reply.split(" to: ", 1)[-1] for reply in replies]
    pairs = zip(said, messages, strict=False)
    return len(said) == len(messages) and all(text.startswith(message) for text, message in pairs)


async def test_two_bots_in_one_process_answer_their_own_chats_from_their_own_sessions(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The same person (the same Telegram user id, so the same chat id) talks to both bots: each bot
    answers on its own token, and each conversation's history holds only what was said to that bot. The
    top-level TELEGRAM_BOT_TOKEN is no bot's (started, it would fail: api.telegram.org is not reachable)."""
    stray = {"TELEGRAM_BOT_TOKEN": "9999:top-level-token"}
    async with two_bots(home, emulator, emulator_url, environ=stray) as harness:
        harness.fakes["family"].private_message(FRIEND, "grandma visits on sunday")
        harness.fakes["work"].private_message(FRIEND, "the quarterly report is due")
        await harness.settled()
        harness.fakes["family"].private_message(FRIEND, "what did I tell the family bot?")
        harness.fakes["work"].private_message(FRIEND, "what did I tell the work bot?")
        await harness.settled()
        family, work = harness.texts("family", FRIEND), harness.texts("work", FRIEND)
        harness.fakes["family"].private_message(FRIEND, "one more for the family")
        await harness.settled()
        metrics = await http_get(harness.gateway.http.url + "/metrics")
        ready = await http_get(harness.gateway.http.url + "/readyz")

    assert answered(family, "grandma visits on sunday", "what did I tell the family bot?"), family
    assert 'gateway_turns_total{bot="family",outcome="answered"} 3.0' in metrics
    assert 'gateway_turns_total{bot="work",outcome="answered"} 2.0' in metrics
    assert '"ready": true' in ready
    assert answered(work, "the quarterly report is due", "what did I tell the work bot?"), work
    family_turn = requests_with(emulator, "what did I tell the family bot?")[0]  # its turn, then the next
    [work_turn] = requests_with(emulator, "what did I tell the work bot?")
    assert "grandma" in family_turn.body.decode() and "quarterly" not in family_turn.body.decode()
    assert "quarterly" in work_turn.body.decode() and "grandma" not in work_turn.body.decode()
    assert (home.root / "bots" / "family" / "state.db").is_file()
    assert (home.root / "bots" / "work" / "state.db").is_file()


async def test_each_bot_speaks_from_its_profile_and_keeps_its_own_memory(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The family bot has a profile of its own (SOUL.md, a skill, memory); the work bot shares the home's
    ('.'). What the owner has the family bot remember lands in the family profile and reaches only the
    family bot's next session."""
    family = home.root / "bots" / "family"
    (family / "skills" / "chores").mkdir(parents=True)
    (family / "SOUL.md").write_text("You are Hearth, the family's helper.\n")
    (family / "skills" / "chores" / "SKILL.md").write_bytes(skill_md("chores", "Plan the week's chores"))
    home.soul_path.write_text("You are Ledger, the office's helper.\n")
    fact = "The family cat is called Miso."
    emulator.script(
        Reply(tool_calls=[ToolUse("memory", {"action": "add", "target": "memory", "content": fact})]),
        Reply(text="Noted."),
    )
    async with two_bots(home, emulator, emulator_url, bots={"work": {"profile": "."}}) as harness:
        harness.fakes["family"].private_message(ADMIN, "remember the cat's name")
        await harness.settled()
        harness.fakes["work"].private_message(ADMIN, "hello work bot")
        await harness.settled()
        harness.fakes["family"].private_message(ADMIN, "/new")
        await harness.settled()
        harness.fakes["family"].private_message(ADMIN, "hello again family bot")
        await harness.settled()

    [first_family] = requests_with(emulator, "remember the cat's name")[:1]
    [work] = requests_with(emulator, "hello work bot")
    [later_family] = requests_with(emulator, "hello again family bot")
    assert "Hearth" in first_family.system_json and "chores" in first_family.system_json
    assert "Ledger" in work.system_json
    assert "Hearth" not in work.system_json and "chores" not in work.system_json
    assert "Miso" not in work.body.decode()
    assert "Miso" in later_family.system_json  # the family bot's new session remembers
    assert fact in (family / "memories" / "MEMORY.md").read_text()
    assert "Miso" not in home.memories_dir.joinpath("MEMORY.md").read_text()


async def test_a_job_belongs_to_the_bot_it_was_made_on_and_posts_through_it(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The owner makes a job on the family bot: the work bot has no job, the run posts in the family chat
    only, and ``herald --bot NAME cron list`` shows each bot's own jobs."""
    async with two_bots(home, emulator, emulator_url) as harness:
        harness.fakes["family"].private_message(ADMIN, "/cron add every 2h | remind us to water the plants")
        await harness.settled()
        [job] = await harness.gateway.bot("family").services.runtime.cron.jobs.all()
        assert await harness.gateway.bot("work").services.runtime.cron.jobs.all() == []
        emulator.script(Reply(text="Time to water the plants."))
        assert await harness.gateway.bot("family").scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        family, work = harness.texts("family", ADMIN), harness.texts("work", ADMIN)
    family_jobs = await herald_cli("--bot", "family", "cron", "list")
    work_jobs = await herald_cli("--bot", "work", "cron", "list")

    assert family[0].startswith("Created job ") and family[-1] == "Time to water the plants."
    assert work == []
    assert job.id in family_jobs and job.id not in work_jobs


def test_herald_bot_names_a_bot_of_the_config_and_no_whole_home_command(
    home: HeraldHome, herald: Any
) -> None:
    home.config_path.write_text("bots:\n  family: {}\n")
    unknown = herald("--bot", "office", "cron", "list")
    whole = herald("--bot", "family", "config", "set", "model.name", "x")
    listed = herald("--bot", "family", "cron", "list")
    assert unknown.returncode == 2 and "has no bot 'office' in bots: (bots: family)" in unknown.stderr
    assert whole.returncode == 2 and "config set is about the whole home, not one bot" in whole.stderr
    assert listed.returncode == 0 and (home.root / "bots" / "family" / "state.db").is_file()

    shared = home.root / "shared.db"
    home.config_path.write_text(f"storage: {{url: 'sqlite:///{shared}'}}\nbots:\n  family: {{}}\n")
    refused = herald("--bot", "family", "cron", "list")
    assert refused.returncode == 2
    assert "the top level and bot family would keep their state in one database" in refused.stderr


def test_herald_bot_chat_talks_to_that_bots_profile_and_keeps_its_session_there(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald: Any
) -> None:
    point_at(home, served)
    tokens = "{TELEGRAM_BOT_TOKEN: $FAMILY_TELEGRAM_TOKEN}"
    family_bot = f"{{family: {{tokens: {tokens}, settings: {{storage: {{url: null}}}}}}}}"
    set_value(home.config_path, "bots", family_bot)  # its state.db in bots/family whatever the top level's
    family = home.root / "bots" / "family"
    family.mkdir(parents=True)
    (family / "SOUL.md").write_text("You are Hearth, the family's helper.\n")
    result = herald("--bot", "family", "chat", "-q", "hello from the terminal")
    again = herald("--bot", "family", "chat", "-q", "--continue", "and again")
    top = herald("chat", "-q", "--continue", "top level")
    assert result.returncode == again.returncode == top.returncode == 0, (result.stderr, again.stderr)
    [first, second, third] = emulator.requests
    assert "Hearth" in first.system_json and first.system_json == second.system_json
    assert "hello from the terminal" in second.body.decode()  # the family bot's session continued
    assert "Hearth" not in third.system_json and "hello from the terminal" not in third.body.decode()


async def test_doctor_checks_each_bots_token_and_no_bot_takes_the_top_level_one(
    home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    family, work = FakeTelegram(TOKENS["family"], username="family_bot"), FakeTelegram(TOKENS["work"])
    async with family.serve() as family_url, work.serve() as work_url:
        home.config_path.write_text(
            yaml.safe_dump({
                "bots": {
                    "family": {
                        "tokens": {"TELEGRAM_BOT_TOKEN": "$FAMILY_TELEGRAM_TOKEN"},
                        "settings": {"telegram": {"base_url": family_url}},
                    },
                    "work": {"settings": {"telegram": {"base_url": work_url}}},
                    "office": {
                        "tokens": {"TELEGRAM_BOT_TOKEN": "$OFFICE_TELEGRAM_TOKEN"},
                        "settings": {"telegram": {"base_url": work_url}},
                    },
                    "desk": {},  # reached through the API only: a key names it
                },
                "api": {"keys": [{"key": "$DESK_API_KEY", "person": "api:alice", "bot": "desk"}]},
            })
        )
        home.env_path.write_text(f"TELEGRAM_BOT_TOKEN={TOKENS['work']}\nOFFICE_TELEGRAM_TOKEN=1:wrong-token\n")
        environ = {"FAMILY_TELEGRAM_TOKEN": TOKENS["family"], "ANTHROPIC_API_KEY": "x"}
        environ["DESK_API_KEY"] = "short"  # too short to be a key
        out = io.StringIO()
        checks = [check_config, check_api_keys, check_platforms]
        await run_doctor(home, offline=False, out=out, checks=checks, environ=environ)
    report = out.getvalue()
    assert "[ok]   bot family telegram: token accepted (bot @family_bot)." in report
    assert "[FAIL] bot work tokens: bot work has no platform: give it a token in bots.work.tokens" in report
    assert "[FAIL] bot office telegram: refused TELEGRAM_BOT_TOKEN (HTTP 401)" in report
    assert "bot desk tokens" not in report  # its API key is its way in
    assert "[FAIL] api: api.keys[0].key ($DESK_API_KEY) has 5 characters; use at least 16" in report
    assert TOKENS["family"] not in report and "wrong-token" not in report


async def test_each_bot_has_its_own_model_its_own_limits_and_its_own_spending(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The family bot runs its own model; the work bot has a whole-bot limit of nothing. Each bot's
    spending is its own: the family bot's turn is in its report only, and the work bot asked nothing."""
    profiles: dict[str, dict[str, Any]] = {
        "family": {"settings": {"model": {"name": "claude-haiku-4-5"}}},
        "work": {"settings": {"budgets": {"bot": {"daily_usd": 0}}}},
    }
    async with two_bots(home, emulator, emulator_url, bots=profiles) as harness:
        harness.fakes["family"].private_message(FRIEND, "a family question")
        harness.fakes["work"].private_message(FRIEND, "a work question")
        await harness.settled()
        family, work = harness.texts("family", FRIEND), harness.texts("work", FRIEND)
    family_report = await herald_cli("--bot", "family", "insights")
    work_report = await herald_cli("--bot", "work", "insights")

    assert answered(family, "a family question")
    assert work == ["This bot has a spend limit of $0.00 for today: no model requests."]
    [family_turn] = requests_with(emulator, "a family question")
    assert family_turn.model == "claude-haiku-4-5" and len(emulator.requests) == 1
    assert "main turns (1 requests)" in family_report and "main turns" not in work_report


async def test_each_bot_receives_its_webhook_at_its_own_path_on_the_one_http_server(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Both bots on Telegram webhooks: each bot's POSTs go to /bots/NAME/telegram/webhook of the one
    server, and each is answered by its own bot."""
    port = free_port()
    webhooks = {
        name: {"settings": {"telegram": {"mode": "webhook", "webhook_url": webhook(port, name)}}}
        for name in TOKENS
    }
    async with two_bots(home, emulator, emulator_url, bots=webhooks, http_port=port) as harness:
        harness.fakes["family"].private_message(FRIEND, "family by webhook")
        harness.fakes["work"].private_message(FRIEND, "work by webhook")
        await harness.settled()
        family, work = harness.texts("family", FRIEND), harness.texts("work", FRIEND)
        posted = {name: fake.webhook_url for name, fake in harness.fakes.items()}
    assert answered(family, "family by webhook") and answered(work, "work by webhook")
    assert posted == {name: webhook(port, name) for name in TOKENS}


def webhook(port: int, bot: str) -> str:
    return f"http://127.0.0.1:{port}/bots/{bot}/telegram/webhook"


# Loggers of one bot's parts: its adapters and their SDK, its scheduler, its database and agent.
BOTS_OWN = ("adapters.", "telegram.", "apscheduler.", "gateway.cron.", "agent.")


async def test_each_bots_start_up_and_shutdown_lines_name_the_bot(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    """Two bots on one platform start alike: each line of a bot's start (its database's, its adapter's,
    its scheduler's) says which bot it is about; the line of the process as a whole lists them. What
    each bot closes at shutdown (its adapters, scheduler, database) logs as the bot too."""
    caplog.set_level(logging.DEBUG)
    async with two_bots(home, emulator, emulator_url):
        said = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
        running = len(caplog.records)
    started = sorted(message for _, message in said if "Telegram adapter started" in message)
    assert started == [
        "bot family: Telegram adapter started as @family_bot, polling",
        "bot work: Telegram adapter started as @work_bot, polling",
    ]
    per_bot = [m for name, m in said if name.startswith(("adapters.", "agent.db.", "gateway.cron."))]
    assert any("schema migrated" in message for message in per_bot), per_bot
    for bot in TOKENS:
        assert sum(message.startswith(f"bot {bot}: ") for message in per_bot) == len(per_bot) / 2, per_bot
    assert any(message.startswith("gateway running: bot family on telegram") for _, message in said), said
    closing = [r.getMessage() for r in caplog.records[running:] if r.name.startswith(BOTS_OWN)]
    unnamed = [message for message in closing if not message.startswith(("bot family: ", "bot work: "))]
    assert not unnamed, unnamed
    assert any("Scheduler has been shut down" in message for message in closing), closing
    for bot in TOKENS:
        assert any(message.startswith(f"bot {bot}: ") for message in closing), closing
