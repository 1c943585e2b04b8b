"""What the fake saw and holds: recorded calls, stored messages, chat actions, webhook deliveries.

Tests read snapshots (:class:`SentMessage`, copies of the call list) so an assertion never races
the server thread that keeps mutating the live records.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RecordedCall:
    """One Bot API request: ``params`` as parsed (JSON values decoded); ``status`` once answered.

    ``status`` is None while the call is in flight (a long poll) and 0 when the fake dropped the
    connection on purpose (:meth:`FakeTelegram.fail_network_next`).
    """

    method: str
    params: dict[str, Any]
    time: float  # time.monotonic() at arrival
    status: int | None = None
    description: str | None = None
    files: dict[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass
class StoredMessage:
    """A message in a chat, the bot's or a user's, in its current state."""

    chat_id: int
    message_id: int
    date: int
    from_bot: bool
    sender: dict[str, Any]
    text: str = ""
    entities: list[dict[str, Any]] = field(default_factory=list)
    kind: str = "text"  # text | document | photo | voice
    media: dict[str, Any] = field(default_factory=dict)  # {"document": {}}, {"photo": []} or {"voice": {}}
    thread_id: int | None = None
    is_topic_message: bool = False
    reply_to: int | None = None
    parse_mode: str | None = None
    link_preview_options: dict[str, Any] | None = None
    reply_markup: dict[str, Any] | None = None
    disable_notification: bool = False
    deleted: bool = False
    edit_date: int | None = None
    versions: list[str] = field(default_factory=list)  # every text it had, oldest first

    def snapshot(self) -> SentMessage:
        return SentMessage(
            chat_id=self.chat_id,
            message_id=self.message_id,
            text=self.text,
            entities=copy.deepcopy(self.entities),
            kind=self.kind,
            thread_id=self.thread_id,
            reply_to_message_id=self.reply_to,
            parse_mode=self.parse_mode,
            link_preview_options=copy.deepcopy(self.link_preview_options),
            reply_markup=copy.deepcopy(self.reply_markup),
            disable_notification=self.disable_notification,
            deleted=self.deleted,
            edited=self.edit_date is not None,
            versions=tuple(self.versions),
            date=self.date,
            media=copy.deepcopy(self.media),
        )


@dataclass(frozen=True)
class SentMessage:
    """A snapshot of one bot message. ``text``/``entities`` are current (after edits); for HTML
    they are the rendered text and the entities Telegram derived; for documents/photos, the caption.
    """

    chat_id: int
    message_id: int
    text: str
    entities: list[dict[str, Any]]
    kind: str
    thread_id: int | None
    reply_to_message_id: int | None
    parse_mode: str | None
    link_preview_options: dict[str, Any] | None
    reply_markup: dict[str, Any] | None
    disable_notification: bool
    deleted: bool
    edited: bool
    versions: tuple[str, ...]
    date: int
    media: dict[str, Any] = field(default_factory=dict)  # a document's, photo's or voice note's file


@dataclass(frozen=True)
class ChatAction:
    """One ``sendChatAction``."""

    chat_id: int
    action: str
    thread_id: int | None
    time: float


@dataclass(frozen=True)
class WebhookDelivery:
    """One POST of an update to the webhook: ``status`` 0 when no HTTP answer came back."""

    update_id: int
    url: str
    status: int
    error: str | None
    time: float


@dataclass
class StoredFile:
    """A file the fake can describe (``getFile``) and serve (``base_file_url``)."""

    file_id: str
    file_unique_id: str
    file_path: str
    content: bytes = field(repr=False)

    def api(self) -> dict[str, Any]:
        return {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": len(self.content),
            "file_path": self.file_path,
        }


@dataclass
class Fault:
    """A scripted HTTP failure for the next ``count`` calls of ``method`` ("*" for any)."""

    method: str
    status: int
    count: int
    retry_after: float | None
    description: str | None
