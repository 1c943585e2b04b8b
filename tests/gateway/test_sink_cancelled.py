"""An adapter stopped in the middle of handing a batch over (the gateway shutting down, a poller
cancelled) cancels the sink call: what was stored by then is dispatched all the same, so it is answered
now, not left pending for a later start (or, in a cluster, for the work queue's periodic rebuild)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from gateway.home import HeraldHome
from gateway.ledger.inbox import InboxEntry
from tests.cluster_support import inbound
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND, telegram_gateway


async def test_a_batch_stored_when_its_sink_call_is_cancelled_is_answered(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.register_chat(FRIEND)  # the chat exists, as one that wrote through Telegram does
        inbox = harness.gateway.services.inbox
        record_batch = inbox.record_batch
        stored, released = asyncio.Event(), asyncio.Event()

        async def stored_then_held(entries: Sequence[InboxEntry]) -> Any:
            rows = await record_batch(entries)
            stored.set()
            await released.wait()  # the batch is stored; the caller is cancelled in here
            return rows

        monkeypatch.setattr(inbox, "record_batch", stored_then_held)
        handing = asyncio.create_task(harness.gateway.router.handle([inbound(int(FRIEND), "hello", "1")]))
        await stored.wait()
        handing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handing
        released.set()
        await harness.settled()
        assert len(harness.texts(FRIEND)) == 1
