"""Several bots in one process (``bots:``): two Telegram bots on one gateway, nothing crossing between them.

Real python-telegram-bot against one fake Bot API per bot, the real anthropic SDK against the emulator.
"""

from __future__ import annotations

from gateway.home import HeraldHome
from tests.bots_support import requests_with, two_bots
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.gateway_support import ADMIN, FRIEND
from tests.state_support import skill_md


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

    assert answered(family, "grandma visits on sunday", "what did I tell the family bot?"), family
    assert answered(work, "the quarterly report is due", "what did I tell the work bot?"), work
    [family_turn] = requests_with(emulator, "what did I tell the family bot?")
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
