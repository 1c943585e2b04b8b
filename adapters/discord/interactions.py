"""Answering slash commands: deferred interactions whose replies come later, through ``send``.

Discord requires the first answer to an interaction within 3 seconds and accepts exactly one; the
gateway answers a command like any message, through its outbox, possibly streaming by edits. So:

1. On ``INTERACTION_CREATE`` the adapter starts deferring at once ("Herald is thinking…", a
   response of type 5; ephemeral for the commands configured so) and queues ``/name args`` behind
   the chat's earlier messages, with ``message_id`` = the interaction id; it reaches the sink once
   the deferral is done. A deferred interaction is recorded here as a :class:`PendingInteraction`,
   for as long as its token is valid (15 minutes from its creation, minus a margin).
2. The gateway replies with ``send(address, text, reply_to=<interaction id>)``. The first such send
   fills the deferred response (``PATCH …/messages/@original``); a later send with the same
   ``reply_to`` becomes a followup message (same ephemerality). Either returns the real message id.
3. ``edit``/``delete`` of a message id recorded here go through the interaction's webhook (the only
   way to edit an ephemeral response); once the interaction expired they fall back to the channel.
4. When the interaction cannot be answered (the deferral failed; expired or unknown: Discord says
   404), the reply becomes an ordinary channel message, so the person still gets the answer.

Parts of an answer that the gateway sends with ``reply_to=None`` are ordinary channel messages; to
keep every part inside the interaction (needed for ephemeral answers), pass the interaction id as
``reply_to`` for each part: followups carry no reply reference, so that pings nobody.

The registry is bounded (:data:`LIMIT` interactions, the oldest forgotten first) and pruned on use.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import discord

from .outbound import NO_MENTIONS

LIFETIME = 15 * 60.0  # how long Discord accepts an interaction token
MARGIN = 30.0  # stop using a token this long before it expires: a request may be slow
LIMIT = 1000


@dataclass
class PendingInteraction:
    """A deferred interaction and the messages that answer it."""

    interaction: discord.Interaction[Any]
    ephemeral: bool
    expires: float  # on the registry's clock
    original_id: str | None = None  # the deferred response, once a send filled it
    followup_ids: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one send at a time fills the original

    @property
    def id(self) -> str:
        return str(self.interaction.id)

    def owns(self, message_id: str) -> bool:
        return message_id == self.original_id or message_id in self.followup_ids


class PendingInteractions:
    """Deferred interactions by id, and which interaction each answer message belongs to."""

    def __init__(
        self,
        *,
        limit: int = LIMIT,
        lifetime: float = LIFETIME - MARGIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limit = limit
        self._lifetime = lifetime
        self._clock = clock
        self._by_id: OrderedDict[str, PendingInteraction] = OrderedDict()
        self._by_message: dict[str, str] = {}  # answer message id -> interaction id

    def __len__(self) -> int:
        self._prune()
        return len(self._by_id)

    def add(self, interaction: discord.Interaction[Any], *, ephemeral: bool) -> PendingInteraction:
        """Record a deferred interaction; its lifetime counts from its creation (its snowflake)."""
        self._prune()
        age = (discord.utils.utcnow() - interaction.created_at).total_seconds()
        remaining = self._lifetime - min(max(age, 0.0), self._lifetime)
        pending = PendingInteraction(interaction, ephemeral, self._clock() + remaining)
        self._by_id[pending.id] = pending
        while len(self._by_id) > self._limit:
            self._forget(next(iter(self._by_id)))
        return pending

    def get(self, interaction_id: str) -> PendingInteraction | None:
        self._prune()
        return self._by_id.get(interaction_id)

    def owner_of(self, message_id: str) -> PendingInteraction | None:
        """The live interaction that ``message_id`` answers, if any."""
        self._prune()
        interaction_id = self._by_message.get(message_id)
        return self._by_id.get(interaction_id) if interaction_id is not None else None

    def answered_with(self, pending: PendingInteraction, message_id: str, *, original: bool) -> None:
        if original:
            pending.original_id = message_id
        else:
            pending.followup_ids.add(message_id)
        if pending.id in self._by_id:
            self._by_message[message_id] = pending.id

    def discard(self, interaction_id: str) -> None:
        self._forget(interaction_id)

    def clear(self) -> None:
        self._by_id.clear()
        self._by_message.clear()

    def _prune(self) -> None:
        now = self._clock()
        while self._by_id:
            oldest = next(iter(self._by_id.values()))
            if oldest.expires > now:
                return
            self._forget(oldest.id)

    def _forget(self, interaction_id: str) -> None:
        pending = self._by_id.pop(interaction_id, None)
        if pending is None:
            return
        for message_id in [pending.original_id, *pending.followup_ids]:
            if message_id is not None:
                self._by_message.pop(message_id, None)


# --- the operations (the adapter adds timeouts and error typing) --------------------------------


async def answer(pending: PendingInteraction, registry: PendingInteractions, content: str) -> str:
    """Fill the deferred response, or add a followup once it is filled; returns the message id."""
    async with pending.lock:
        interaction = pending.interaction
        if pending.original_id is None:
            message: discord.Message = await interaction.edit_original_response(
                content=content, allowed_mentions=NO_MENTIONS
            )
            registry.answered_with(pending, str(message.id), original=True)
        else:
            followup = await interaction.followup.send(
                content, wait=True, ephemeral=pending.ephemeral, allowed_mentions=NO_MENTIONS
            )
            message = followup
            registry.answered_with(pending, str(message.id), original=False)
        return str(message.id)


async def edit(pending: PendingInteraction, message_id: str, content: str) -> None:
    interaction = pending.interaction
    if message_id == pending.original_id:
        await interaction.edit_original_response(content=content, allowed_mentions=NO_MENTIONS)
    else:
        followup = interaction.followup
        await followup.edit_message(int(message_id), content=content, allowed_mentions=NO_MENTIONS)


async def delete(pending: PendingInteraction, message_id: str) -> None:
    interaction = pending.interaction
    if message_id == pending.original_id:
        await interaction.delete_original_response()
    else:
        await interaction.followup.delete_message(int(message_id))
