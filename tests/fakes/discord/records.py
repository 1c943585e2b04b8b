"""What the fake saw and holds: REST calls, messages, interactions, command syncs, gateway traffic.

Tests read frozen snapshots (:class:`SentMessage`) or copies of the record lists, so an assertion
never races the server thread that keeps mutating the live records.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

EPHEMERAL = 1 << 6
LOADING = 1 << 7  # a deferred interaction response ("Bot is thinking...")


@dataclass
class RecordedCall:
    """One REST request. ``path`` is relative to ``/api/v10``; ``route`` is its template
    (``/channels/{channel_id}/messages``), None for unknown routes; ``json`` is the decoded JSON
    body (for multipart, ``payload_json``); ``status`` is None while in flight and 0 when the fake
    dropped the connection on purpose."""

    method: str
    path: str
    route: str | None
    json: Any
    query: dict[str, str]
    time: float  # time.monotonic() at arrival
    status: int | None = None
    response: Any = None
    files: dict[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str | None  # None: left out, as Discord does for some uploads
    data: bytes = field(repr=False)
    voice: bool = False  # a voice message (its attachment has a duration and a waveform)
    duration: float = 3.0  # a voice message's, as its sender said
    waveform: str = "AAAA"  # base64 of its loudness bytes, as its sender said


@dataclass
class StoredMessage:
    """A message in a channel, the bot's or a user's, in its current state."""

    id: int
    channel_id: int
    guild_id: int | None
    author_id: int
    content: str
    timestamp: str
    type: int = 0
    embeds: list[dict[str, Any]] = field(default_factory=list)
    components: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[tuple[int, Attachment]] = field(default_factory=list)  # (attachment id, file)
    allowed_mentions: dict[str, Any] | None = None
    message_reference: dict[str, Any] | None = None
    mentions: list[int] = field(default_factory=list)
    mention_roles: list[int] = field(default_factory=list)
    mention_everyone: bool = False
    flags: int = 0
    tts: bool = False
    nonce: str | int | None = None
    interaction_id: int | None = None
    webhook_id: int | None = None
    edited_timestamp: str | None = None
    deleted: bool = False
    versions: list[str] = field(default_factory=list)  # every content it had, oldest first

    def snapshot(self) -> SentMessage:
        return SentMessage(
            channel_id=self.channel_id,
            message_id=self.id,
            guild_id=self.guild_id,
            author_id=self.author_id,
            content=self.content,
            embeds=copy.deepcopy(self.embeds),
            components=copy.deepcopy(self.components),
            attachments=tuple(a for _, a in self.attachments),
            allowed_mentions=copy.deepcopy(self.allowed_mentions),
            message_reference=copy.deepcopy(self.message_reference),
            mentions=tuple(self.mentions),
            mention_everyone=self.mention_everyone,
            flags=self.flags,
            tts=self.tts,
            nonce=self.nonce,
            interaction_id=self.interaction_id,
            deleted=self.deleted,
            edited=self.edited_timestamp is not None,
            versions=tuple(self.versions),
        )


@dataclass(frozen=True)
class SentMessage:
    """A snapshot of one message. ``content``/``embeds`` are current (after edits); ``versions``
    holds every content it had. ``allowed_mentions`` is what the sender passed at creation (None:
    the field was absent, so Discord parsed every mention); ``mentions`` are the user ids Discord
    resolved from that; ``mention_everyone`` says whether ``@everyone``/``@here`` pinged."""

    channel_id: int
    message_id: int
    guild_id: int | None
    author_id: int
    content: str
    embeds: list[dict[str, Any]]
    components: list[dict[str, Any]]
    attachments: tuple[Attachment, ...]
    allowed_mentions: dict[str, Any] | None
    message_reference: dict[str, Any] | None
    mentions: tuple[int, ...]
    mention_everyone: bool
    flags: int
    tts: bool
    nonce: str | int | None
    interaction_id: int | None
    deleted: bool
    edited: bool
    versions: tuple[str, ...]

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    @property
    def reply_to(self) -> int | None:
        """The id of the message this one replies to, if any."""
        ref = self.message_reference
        return int(ref["message_id"]) if ref and ref.get("message_id") is not None else None


@dataclass(frozen=True)
class TypingEvent:
    channel_id: int
    time: float


@dataclass(frozen=True)
class CommandSync:
    """One bulk overwrite (``PUT``) of the application commands: global when ``guild_id`` is None."""

    guild_id: int | None
    commands: list[dict[str, Any]]
    time: float


@dataclass
class InteractionRecord:
    """An interaction the fake dispatched, and how it was answered."""

    id: int
    token: str
    type: int
    name: str
    channel_id: int
    guild_id: int | None
    user_id: int
    created: float  # time.monotonic() at dispatch
    payload: dict[str, Any] = field(repr=False)
    callback_type: int | None = None  # the first (only valid) callback
    original_message_id: int | None = None
    followup_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class InteractionResponse:
    """One answer to an interaction: ``kind`` is ``callback`` (with ``type`` 4/5/6/7/...),
    ``edit_original``, ``delete_original``, ``followup`` or ``edit_followup``; ``data`` is the JSON
    sent (the callback's ``data`` part); ``status`` the HTTP status the fake answered."""

    interaction_id: int
    kind: str
    type: int | None
    data: dict[str, Any]
    status: int
    time: float
    message_id: int | None = None
    error: str | None = None

    @property
    def flags(self) -> int:
        return int(self.data.get("flags") or 0)

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Dispatch:
    """One gateway event the fake emitted, with the session ids and sequence numbers it got."""

    event: str
    data: dict[str, Any] = field(repr=False)
    sessions: tuple[tuple[str, int], ...]  # (session id, seq) for every session it was queued on
    time: float


@dataclass
class GatewayConnection:
    """One websocket connection to the fake gateway: where it came, how it ended."""

    id: int
    path: str  # "/gateway" (a fresh connect) or "/resume" (READY's resume_gateway_url)
    query: dict[str, str]
    opened: float
    session_id: str | None = None
    op: str | None = None  # "identify" or "resume", once the client sent it
    closed: float | None = None
    close_code: int | None = None  # the code the fake closed with, or the client's
    closed_by: str | None = None  # "fake" or "client"
    received_ops: list[int] = field(default_factory=list)
    shard: tuple[int, int] | None = None  # (shard id, shard count) its session identified as, if sharded

    @property
    def compress(self) -> str | None:
        return self.query.get("compress")


@dataclass
class Fault:
    """A scripted REST failure for the next ``count`` requests matching ``method``/``path``."""

    method: str | None  # None: any method
    path: re.Pattern[str] | None  # None: any path
    status: int
    count: int
    retry_after: float
    global_: bool
    code: int | None
    message: str | None
    network: bool = False  # drop the connection instead of answering
    label: str = ""
    takes_effect: bool = False  # with ``network``: the request is carried out before the connection drops

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        return self.path is None or self.path.fullmatch(path) is not None
