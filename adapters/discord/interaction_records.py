"""What the adapter keeps about the slash commands it took, and the seam to whoever keeps it.

An interaction is answered through its webhook (application id + token) for 15 minutes; nothing else
of the ``discord.Interaction`` object is needed. So the adapter records those facts
(:class:`InteractionRecord`) and the messages that answer it, through :class:`InteractionRecords`:
in memory when the adapter runs on its own (:class:`MemoryInteractionRecords`), in the gateway's
database when the gateway composes it, so that a deferred command is still answered after a restart,
or by another process.

Records are kept for :data:`KEEP_AFTER_EXPIRY` after their token expired: an answer that comes later
than the token (the gateway was down, a send kept failing) still knows its command was private, so it
is never posted in the channel instead.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

LIFETIME = 15 * 60.0  # how long Discord accepts an interaction token
MARGIN = 30.0  # stop using a token this long before it expires: a request may be slow
KEEP_AFTER_EXPIRY = 7 * 86400.0
LIMIT = 10_000  # records an in-memory registry holds (the oldest forgotten first)


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


class InteractionRecords(ABC):
    """Where interaction records live.

    Contract:

    - :meth:`remember` is idempotent: a record with the same id is kept as it was.
    - :meth:`find` and :meth:`owner_of` return the record with every message recorded for it before the
      call; records are dropped :data:`KEEP_AFTER_EXPIRY` after ``expires_at``, never sooner.
    - :meth:`add_message` is idempotent (a message answers one interaction, in one role).
    - :meth:`expire` only ever moves ``expires_at`` earlier: retrying it, or racing another process's,
      is harmless.
    - Each method is one operation: it happened or, when it raised, it did not.

    The adapter answers one interaction from one process at a time (the gateway serves a chat from one
    process); concurrent sends in this process are serialized by the adapter.
    """

    @abstractmethod
    async def remember(self, record: InteractionRecord) -> None:
        """Keep ``record`` (its ``messages`` are ignored: add them with :meth:`add_message`)."""

    @abstractmethod
    async def find(self, interaction_id: str) -> InteractionRecord | None:
        """The record of ``interaction_id``."""

    @abstractmethod
    async def owner_of(self, message_id: str) -> InteractionRecord | None:
        """The record of the interaction that ``message_id`` answers."""

    @abstractmethod
    async def add_message(self, interaction_id: str, message_id: str, role: Role) -> None:
        """Record that ``message_id`` answers ``interaction_id`` as ``role``."""

    @abstractmethod
    async def expire(self, interaction_id: str, at: float) -> None:
        """The token no longer answers it from ``at`` on (Discord said it does not know it)."""


class MemoryInteractionRecords(InteractionRecords):
    """Records in this process's memory: bounded (:data:`LIMIT`, oldest first) and pruned on use."""

    def __init__(self, *, limit: int = LIMIT, clock: Callable[[], float] = time.time) -> None:
        self._limit = limit
        self._clock = clock
        self._by_id: OrderedDict[str, InteractionRecord] = OrderedDict()  # oldest first
        self._by_message: dict[str, str] = {}  # answer message id -> interaction id

    def __len__(self) -> int:
        self._prune()
        return len(self._by_id)

    async def remember(self, record: InteractionRecord) -> None:
        self._prune()
        if record.id in self._by_id:
            return
        self._by_id[record.id] = replace(record, messages={})
        while len(self._by_id) > self._limit:
            self._forget(next(iter(self._by_id)))

    async def find(self, interaction_id: str) -> InteractionRecord | None:
        self._prune()
        return self._by_id.get(interaction_id)

    async def owner_of(self, message_id: str) -> InteractionRecord | None:
        self._prune()
        interaction_id = self._by_message.get(message_id)
        return None if interaction_id is None else self._by_id.get(interaction_id)

    async def add_message(self, interaction_id: str, message_id: str, role: Role) -> None:
        record = self._by_id.get(interaction_id)
        if record is None or message_id in self._by_message:
            return
        self._by_id[interaction_id] = replace(record, messages={**record.messages, message_id: role})
        self._by_message[message_id] = interaction_id

    async def expire(self, interaction_id: str, at: float) -> None:
        record = self._by_id.get(interaction_id)
        if record is not None and at < record.expires_at:
            self._by_id[interaction_id] = replace(record, expires_at=at)

    def _prune(self) -> None:
        """Drop the oldest records while they are past keeping (records arrive in expiry order)."""
        horizon = self._clock() - KEEP_AFTER_EXPIRY
        while self._by_id:
            oldest = next(iter(self._by_id.values()))
            if oldest.expires_at > horizon:
                return
            self._forget(oldest.id)

    def _forget(self, interaction_id: str) -> None:
        record = self._by_id.pop(interaction_id, None)
        for message_id in record.messages if record is not None else ():
            self._by_message.pop(message_id, None)
