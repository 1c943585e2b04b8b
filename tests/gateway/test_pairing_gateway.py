"""Pairing end to end: the welcome of an approved person is said before anything else they get, whichever
process approved them. Real python-telegram-bot against the fake Bot API, the real anthropic SDK against
the emulator, ``herald pairing approve`` run as the command line runs it."""

from __future__ import annotations

import pytest

from gateway.access.pairing import WELCOME
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import STRANGER, telegram_gateway
from tests.helpers import herald_cli

pytestmark = pytest.mark.timeout(60)


async def test_the_welcome_after_an_approval_comes_before_the_answer_to_the_first_message(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The running gateway looks at what another process queued only this often (herald pairing
    # approve is another process): make it long, so the welcome waits unless something sends it first.
    monkeypatch.setattr("gateway.delivery.sender.IDLE_WAIT", 120.0)
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(STRANGER, "hi")
        await harness.settled()
        [code] = await harness.gateway.services.pairing.pending()
        await herald_cli("pairing", "approve", "telegram", code.code)
        emulator.script(Reply(text="Hello! Nice to meet you. " * 10))
        harness.fake.private_message(STRANGER, "hello there")
        await harness.settled()
        shown = harness.texts(STRANGER)

    assert shown[1:] == [WELCOME, ("Hello! Nice to meet you. " * 10).strip()]
