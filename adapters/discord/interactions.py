"""Answering slash commands: deferred interactions whose replies come later, through ``send``.

Discord requires the first answer to an interaction within 3 seconds and accepts exactly one; the
gateway answers a command like any message, through its outbox, possibly streaming by edits. So:

1. On ``INTERACTION_CREATE`` the adapter starts deferring at once ("Herald is thinking…", a
   response of type 5; ephemeral for the commands configured so) and queues ``/name args`` behind
   the chat's earlier messages, with ``message_id`` = the interaction id. Before the message reaches
   the sink, the interaction is recorded (:func:`interaction_record`, kept by an
   ``InteractionRecords``): its webhook's application id and token, whether the deferral was taken,
   whether it is private, and until when its token may be used (15 minutes from its creation, minus a
   margin, in wall-clock time). Nothing else of the ``discord.Interaction`` is needed to answer it, so
   the answer may come after a restart, or from another process.
2. The gateway replies with ``send(address, text, reply_to=<interaction id>)``. The first such send
   fills the deferred response (``PATCH …/messages/@original``); a later send with the same
   ``reply_to`` becomes a followup message (same ephemerality). Either returns the real message id,
   recorded as the interaction's.
3. ``edit``/``delete`` of a message recorded for an interaction go through the interaction's webhook
   (the only way to edit an ephemeral response); once the token expired they fall back to the channel.
4. When the interaction cannot be answered (the deferral failed; expired or unknown: Discord says
   404), the reply becomes an ordinary channel message, so the person still gets the answer; for a
   private command a notice says so instead, once (the answer is never posted for all to see, and
   edits of that notice are dropped).

Parts of an answer that the gateway sends with ``reply_to=None`` are ordinary channel messages; to
keep every part inside the interaction (needed for ephemeral answers), pass the interaction id as
``reply_to`` for each part: followups carry no reply reference, so that pings nobody.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import discord
from discord.http import handle_message_parameters
from discord.webhook.async_ import async_context

from .interaction_records import LIFETIME, MARGIN, InteractionRecord, InteractionRecords, Role
from .outbound import NO_MENTIONS

log = logging.getLogger(__name__)

UNKNOWN_MESSAGE = 10008  # Discord's code when the message is gone but the interaction is not


def interaction_record(
    interaction: discord.Interaction[Any], *, command: str, ephemeral: bool, deferred: bool
) -> InteractionRecord:
    """What answers ``interaction`` later; its token expires 15 minutes after its creation (its
    snowflake's time), less a margin."""
    return InteractionRecord(
        id=str(interaction.id),
        application_id=str(interaction.application_id),
        token=interaction.token,
        channel_id=str(interaction.channel_id),
        command=command,
        ephemeral=ephemeral,
        deferred=deferred,
        expires_at=interaction.created_at.timestamp() + LIFETIME - MARGIN,
    )


class InteractionWebhook:
    """One interaction's webhook, built from its stored application id and token (``hook``: an
    application webhook, see ``HeraldClient.interaction_webhook``). The routes are the ones discord.py's
    own ``Interaction`` uses: ``…/messages/@original`` for the deferred response (through discord.py's
    webhook adapter, as ``Interaction.edit_original_response`` does), the webhook's followup methods
    for the rest."""

    def __init__(self, hook: discord.Webhook) -> None:
        self._hook = hook

    async def edit_original(self, content: str) -> str:
        """Fill (or edit) the deferred response; returns its message id."""
        hook = self._hook
        token = hook.token or ""
        with handle_message_parameters(content=content, allowed_mentions=NO_MENTIONS) as params:
            data = await async_context.get().edit_original_interaction_response(
                hook.id,
                token,
                session=hook.session,
                proxy=hook.proxy,
                proxy_auth=hook.proxy_auth,
                payload=params.payload,
            )
        return str(data["id"])

    async def delete_original(self) -> None:
        hook = self._hook
        await async_context.get().delete_original_interaction_response(
            hook.id, hook.token or "", session=hook.session, proxy=hook.proxy, proxy_auth=hook.proxy_auth
        )

    async def follow_up(self, content: str, *, ephemeral: bool) -> str:
        message = await self._hook.send(content, wait=True, ephemeral=ephemeral, allowed_mentions=NO_MENTIONS)
        return str(message.id)

    async def edit_followup(self, message_id: str, content: str) -> None:
        await self._hook.edit_message(int(message_id), content=content, allowed_mentions=NO_MENTIONS)

    async def delete_followup(self, message_id: str) -> None:
        await self._hook.delete_message(int(message_id))


class InteractionAnswers:
    """Sends, edits and deletes that go through a recorded interaction's webhook.

    Each method returns whether the webhook did it; when it did not (the token expired, Discord no
    longer knows the interaction: then the record is expired), the caller falls back to the channel.
    Operations on one interaction run one at a time (:meth:`hold`), so exactly one send fills the
    deferred response.
    """

    def __init__(
        self,
        records: InteractionRecords,
        webhook: Callable[[InteractionRecord], InteractionWebhook],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.records = records
        self._webhook = webhook
        self._clock = clock
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # interaction id -> (lock, users)

    @asynccontextmanager
    async def hold(self, interaction_id: str) -> AsyncIterator[None]:
        """One operation on ``interaction_id`` at a time, in this process (the lock is dropped when
        nobody holds or waits for it)."""
        lock, users = self._locks.get(interaction_id, (asyncio.Lock(), 0))
        self._locks[interaction_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[interaction_id]
            if users == 1:
                del self._locks[interaction_id]
            else:
                self._locks[interaction_id] = (lock, users - 1)

    async def answer(self, record: InteractionRecord, content: str) -> str | None:
        """Fill the deferred response, or follow up once it is filled; the message id, or None when
        the token no longer answers the interaction."""
        async with self.hold(record.id):
            record = await self.records.find(record.id) or record  # another send may have filled it
            if not record.answerable(self._clock()):
                return None
            webhook = self._webhook(record)
            role = Role.ORIGINAL if record.message(Role.ORIGINAL) is None else Role.FOLLOWUP
            try:
                if role is Role.ORIGINAL:
                    message_id = await webhook.edit_original(content)
                else:
                    message_id = await webhook.follow_up(content, ephemeral=record.ephemeral)
            except discord.NotFound:
                await self._gone(record)
                return None
            await self.records.add_message(record.id, message_id, role)
            return message_id

    async def edit(self, record: InteractionRecord, message_id: str, content: str) -> bool:
        """Edit an answer; False when the webhook could not (the caller edits through the channel)."""
        if not record.answerable(self._clock()):
            return False
        webhook = self._webhook(record)
        try:
            if record.messages.get(message_id) is Role.ORIGINAL:
                await webhook.edit_original(content)
            else:
                await webhook.edit_followup(message_id, content)
        except discord.NotFound as error:
            if error.code != UNKNOWN_MESSAGE:  # the interaction is gone, not just this message
                await self._gone(record)
            return False
        return True

    async def delete(self, record: InteractionRecord, message_id: str) -> bool:
        """Delete an answer; a message that is already gone counts as deleted."""
        if not record.answerable(self._clock()):
            return False
        webhook = self._webhook(record)
        try:
            if record.messages.get(message_id) is Role.ORIGINAL:
                await webhook.delete_original()
            else:
                await webhook.delete_followup(message_id)
        except discord.NotFound:
            pass
        return True

    async def _gone(self, record: InteractionRecord) -> None:
        log.info("Discord interaction %s expired or vanished; replying in the channel", record.id)
        await self.records.expire(record.id, self._clock())
