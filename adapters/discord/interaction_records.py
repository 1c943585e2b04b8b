"""What the adapter keeps about the slash commands it took, in the record store it was given.

An interaction is answered through its webhook (application id + token) for 15 minutes; nothing else
of the ``discord.Interaction`` object is needed. So the adapter records those facts
(:class:`InteractionRecord`) and the messages that answer it, through :class:`InteractionRecords`, in
an ``adapters.records.RecordStore``: in memory when the adapter runs on its own, in the gateway's
database when the gateway composes it (the spec asks for it), so that a deferred command is still
answered after a restart, or by another process.

Records are kept for :data:`KEEP_AFTER_EXPIRY` after their token expired: an answer that comes later
than the token (the gateway was down, a send kept failing) still knows its command was private, so it
is never posted in the channel instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from adapters.records import RecordsPolicy, RecordStore, StoredRecord

LIFETIME = 15 * 60.0  # how long Discord accepts an interaction token
MARGIN = 30.0  # stop using a token this long before it expires: a request may be slow
KEEP_AFTER_EXPIRY = 7 * 86400.0
RECORDS = RecordsPolicy(keep_after_expiry=KEEP_AFTER_EXPIRY)  # what the spec asks of the gateway's store


class Role(StrEnum):
    """What a message is to the interaction it answers."""

    ORIGINAL = "original"  # the deferred response ("thinking…"), filled by the first answer
    FOLLOWUP = "followup"  # a later answer
    NOTICE = "notice"  # a channel message saying a private answer could not be given privately


@dataclass(frozen=True)
class InteractionRecord:
    """A slash command the adapter took, and the messages that answer it so far."""

    id: str
    application_id: str
    token: str
    channel_id: str
    command: str  # its name, without the slash
    ephemeral: bool  # only the invoker may see the answer
    deferred: bool  # Discord accepted the deferral: the token can answer it
    expires_at: float  # wall clock (``time.time()``): the token is not used from then on
    messages: Mapping[str, Role] = field(default_factory=dict)  # message id -> role

    def answerable(self, now: float) -> bool:
        """Whether the token still answers it."""
        return self.deferred and now < self.expires_at

    def message(self, role: Role) -> str | None:
        """The message with ``role`` (the original, the notice), if one was recorded."""
        return next((message_id for message_id, has in self.messages.items() if has is role), None)


class InteractionRecords:
    """Interaction records in a record store: ``interaction:ID`` holds a command's facts, with one child
    ``message:ID`` (its role) per message that answers it.

    Contract (the store's, ``adapters.records.RecordStore``, gives it):

    - :meth:`remember` is idempotent: a record with the same id is kept as it was.
    - :meth:`find` and :meth:`owner_of` return the record with every message recorded for it before the
      call; records are dropped :data:`KEEP_AFTER_EXPIRY` after ``expires_at``, never sooner.
    - :meth:`add_message` is idempotent (a message answers one interaction, in one role).
    - :meth:`expire` only ever moves ``expires_at`` earlier: retrying it, or racing another process's,
      is harmless.
    - Each method is one operation: it happened or, when it raised, it did not
      (``resilience.unreachable.Unreachable`` when the store cannot be reached).

    The adapter answers one interaction from one process at a time (the gateway serves a chat from one
    process); concurrent sends in this process are serialized by the adapter.
    """

    def __init__(self, store: RecordStore) -> None:
        self.store = store

    async def remember(self, record: InteractionRecord) -> None:
        """Keep ``record`` (its ``messages`` are ignored: add them with :meth:`add_message`)."""
        facts = {
            "application_id": record.application_id,
            "token": record.token,
            "channel_id": record.channel_id,
            "command": record.command,
            "ephemeral": record.ephemeral,
            "deferred": record.deferred,
        }
        await self.store.add(_interaction(record.id), facts, expires_at=record.expires_at)

    async def find(self, interaction_id: str) -> InteractionRecord | None:
        """The record of ``interaction_id``."""
        stored = await self.store.get(_interaction(interaction_id))
        return None if stored is None else _from_stored(interaction_id, stored)

    async def owner_of(self, message_id: str) -> InteractionRecord | None:
        """The record of the interaction that ``message_id`` answers."""
        link = await self.store.get(_message(message_id))
        return None if link is None else await self.find(str(link.value["interaction"]))

    async def add_message(self, interaction_id: str, message_id: str, role: Role) -> None:
        """Record that ``message_id`` answers ``interaction_id`` as ``role``."""
        link = {"interaction": interaction_id, "role": role.value}
        await self.store.add(_message(message_id), link, parent=_interaction(interaction_id))

    async def expire(self, interaction_id: str, at: float) -> None:
        """The token no longer answers it from ``at`` on (Discord said it does not know it)."""
        await self.store.expire(_interaction(interaction_id), at)


def _interaction(interaction_id: str) -> str:
    return f"interaction:{interaction_id}"


def _message(message_id: str) -> str:
    return f"message:{message_id}"


def _from_stored(interaction_id: str, stored: StoredRecord) -> InteractionRecord:
    facts = stored.value
    return InteractionRecord(
        id=interaction_id,
        application_id=str(facts["application_id"]),
        token=str(facts["token"]),
        channel_id=str(facts["channel_id"]),
        command=str(facts["command"]),
        ephemeral=bool(facts["ephemeral"]),
        deferred=bool(facts["deferred"]),
        expires_at=stored.expires_at if stored.expires_at is not None else 0.0,
        messages={
            key.removeprefix("message:"): Role(link["role"]) for key, link in stored.children.items()
        },
    )
