"""The one road every reply takes: rendered for its platform, queued in the outbox, the sender woken.

Whatever Herald says into a chat — a turn's answer, a command's reply, a refusal, a pairing code, a
notice, a scheduled job's result — is queued here and nowhere else, so "recorded before it is sent" and
"a reply closes its inbox row in the same transaction" hold for all of them (docs/ARCHITECTURE.md,
reliability invariants 1-2), and the sender is told once per queueing.

Contract: every method returns once the reply is durably queued (or raises: nothing was queued);
the row given is closed in the same transaction. Sending happens later, in the sender's order per chat.
The one thing said around the outbox, an answer streamed while it is written, first waits for what the
chat's outbox holds (:meth:`Replies.delivered`): a notice queued before a turn (a welcome, a new
session, a compression) is never shown after the answer it precedes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from adapters.base import Adapter, ChatAddress
from gateway.chats import reply_address
from gateway.delivery.sender import OutboxSender
from gateway.delivery.stream import answer_operations
from gateway.ledger.inbox import InboxRow, InboxState
from gateway.ledger.outbox import Outbox, Outgoing

DELIVERED_POLL = 0.05  # seconds between looks at a chat's outbox while a stream waits for it


class PlatformNotConnected(Exception):
    """A reply for a platform this gateway does not serve (a job's target chat on a platform that is off)."""


class Replies:
    def __init__(self, outbox: Outbox, sender: OutboxSender, adapters: Mapping[str, Adapter]) -> None:
        self.outbox = outbox
        self.sender = sender
        self.adapters = adapters

    async def answer(
        self,
        row: InboxRow,
        text: str,
        *,
        state: InboxState = InboxState.ANSWERED,
        streamed: Sequence[str] = (),
        every_part_replies: bool = False,
    ) -> None:
        """Answer the stored message ``row`` with ``text`` and close it as ``state``.

        ``streamed``: messages already showing part of the answer (edited into the final text).
        ``every_part_replies``: each part of a long answer replies to the message, not only the first
        (a Discord slash command keeps its parts inside the interaction that way).
        """
        message = row.message
        operations = self.render(reply_address(message), text, streamed=streamed, reply_to=message.message_id)
        if every_part_replies:
            operations = [_replying(operation, message.message_id) for operation in operations]
        await self.queue(operations, row=row, state=state)

    async def post(self, address: ChatAddress, text: str, *, reply_to: str | None = None) -> list[int]:
        """Say ``text`` in a chat, not as the answer to a stored message; returns the outbox ids."""
        return await self.queue(self.render(address, text, streamed=(), reply_to=reply_to))

    async def queue(
        self, operations: Sequence[Outgoing], *, row: InboxRow | None = None, state: InboxState | None = None
    ) -> list[int]:
        """Queue operations that were already rendered (a streamed answer's final edits); close ``row``
        as ``state`` in the same transaction when both are given."""
        ids = await self.outbox.enqueue(
            list(operations), inbox_id=row.id if row is not None else None, finish=state if row else None
        )
        self.sender.notify()
        return ids

    async def delivered(self, address: ChatAddress, timeout: float) -> bool:  # noqa: ASYNC109 - bounded poll
        """Wait until the outbox holds nothing unsent for ``address``'s chat: True, or False after
        ``timeout`` seconds (then say nothing around the outbox: what follows queues behind it)."""
        deadline = time.monotonic() + timeout
        while await self.outbox.pending_for(address):
            if time.monotonic() >= deadline:
                return False
            self.sender.notify()  # queued by another process (herald pairing approve): send it now
            await asyncio.sleep(DELIVERED_POLL)
        return True

    def render(
        self, address: ChatAddress, text: str, *, streamed: Sequence[str], reply_to: str | None
    ) -> list[Outgoing]:
        adapter = self.adapters.get(address.platform)
        if adapter is None:
            raise PlatformNotConnected(f"{address.platform} is not connected to this gateway")
        return answer_operations(
            adapter.capabilities, address, text, streamed=list(streamed), reply_to=reply_to
        )


def _replying(operation: Outgoing, reply_to: str) -> Outgoing:
    return replace(operation, reply_to=reply_to)
