"""Several bots in one process (``bots:``): two Telegram bots on one gateway, nothing crossing between them.

Real python-telegram-bot against one fake Bot API per bot, the real anthropic SDK against the emulator.
"""

from __future__ import annotations

from gateway.home import HeraldHome
from tests.bots_support import requests_with, two_bots
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND


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
