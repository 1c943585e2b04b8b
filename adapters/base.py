"""The adapter seam: a platform SDK on one side, neutral messages and operations on the other.

An adapter knows nothing about LLMs, sessions, prompts or authorization. It turns platform updates
into :class:`InboundMessage` and hands them to the gateway's :data:`InboundSink`; it executes neutral
outbound operations (send, edit, delete, typing) and reports failures as :class:`DeliveryError`.

Contracts an adapter keeps:

- **Store before confirm.** The sink takes a batch (what one ``getUpdates`` brought, or one message)
  and returns only once every message of it is durably recorded (or deliberately dropped), in one
  transaction. An adapter confirms messages to its platform (advances a polling offset, answers a
  webhook with 200) only after the sink returned; if the sink raises, none of the batch is confirmed
  and the platform delivers it again. :class:`SinkUnavailable` says the gateway cannot store now (its
  database is unreachable): hand the batch over again later, and keep what the platform will not send
  again; any other exception is a failure worth a log line with its traceback.
- **Ordering.** Messages of one chat are handed to the sink in the platform's order, one batch at a
  time.
- **Neutral outbound.** ``send``/``edit`` get text that was already rendered and split for this
  adapter's :class:`Capabilities`; an adapter converts it to its SDK's types and never re-splits.
  ``send_voice`` (only where ``Capabilities.voice_notes``) gets a voice note already encoded as the
  platforms want it (:class:`OutboundVoice`: OGG/Opus).
- **"Not modified" is success.** Editing a message to the text it already shows does not raise.
- **Failures are typed.** Every platform error leaves as :class:`DeliveryError` saying whether a retry
  can help, how long to wait, and whether the formatting was what the platform rejected.

An adapter may be called from several tasks at once (different chats); ``start`` and ``stop`` are
called once each, by the gateway's lifecycle.

**Receiving on demand.** Some platforms let only one connection per bot receive (Telegram's
``getUpdates``, Discord's gateway). An adapter for one sets ``receive_on_demand``: ``start(sink,
receive=False)`` connects for sending only, and ``start_receiving``/``stop_receiving`` turn receiving
on and off any number of times while sending goes on. Several processes of one bot then all send,
and the one the gateway elects receives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal


class ChatType(StrEnum):
    DIRECT = "direct"  # a one-to-one chat with the bot
    GROUP = "group"  # a group, supergroup or server channel shared by several people
    CHANNEL = "channel"  # a broadcast channel: the bot may post but people don't talk to it


@dataclass(frozen=True)
class Attachment:
    """What arrived with a message (its content is fetched only when needed)."""

    # "document", "photo", "audio", "voice", "video", "video_note", "animation", "sticker"; or content
    # with no file Herald reads ("story", "game", ...: file_id "").
    kind: str
    file_id: str
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class InboundMessage:
    """One message a person sent, in the platform's words but no platform types.

    ``addressed`` is true when the message mentions the bot, replies to one of its messages, or is a
    command aimed at it (in a direct chat every message is addressed). ``message_id`` is unique within
    ``(platform, chat_id)`` and is what deduplicates a platform's redelivery.
    """

    platform: str
    chat_id: str
    chat_type: ChatType
    user_id: str
    user_name: str
    message_id: str
    text: str
    timestamp: float
    thread_id: str | None = None  # a forum topic or a thread: part of where the reply goes
    reply_to_id: str | None = None
    addressed: bool = False
    chat_title: str | None = None
    attachments: tuple[Attachment, ...] = ()
    server_id: str | None = None  # the server (Discord guild) a shared chat belongs to
    parent_chat_id: str | None = None  # the channel a thread belongs to (a thread is a chat of its own)


@dataclass(frozen=True)
class ChatAddress:
    """Where a reply goes: a chat, and a topic or thread within it."""

    platform: str
    chat_id: str
    thread_id: str | None = None


@dataclass(frozen=True)
class TextEntity:
    """One formatting span of an ``OutboundText``, in Telegram's vocabulary.

    ``type`` is a Telegram entity type (bold, italic, underline, strikethrough, spoiler, code, pre,
    text_link, blockquote, expandable_blockquote, custom_emoji...). ``offset`` and ``length`` count
    UTF-16 code units, as Telegram does, so the Telegram adapter hands them over unchanged.
    ``url`` belongs to text_link, ``language`` to pre, ``custom_emoji_id`` to custom_emoji.
    """

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None
    custom_emoji_id: str | None = None


@dataclass(frozen=True)
class OutboundText:
    """Plain text plus formatting entities: one message, already within the platform's limit.

    Neutral on purpose: adapters convert it to their SDK's types, so the gateway never imports one.
    """

    text: str
    entities: tuple[TextEntity, ...] = ()


@dataclass(frozen=True)
class Capabilities:
    """What the gateway must know to render, split and stream for a platform."""

    max_message_length: int  # per message, in ``length_unit``
    length_unit: str  # "utf16" (Telegram) or "chars"
    formatting: str  # "telegram_entities": text + entities; "markdown": pass through; "plain"
    can_edit: bool  # streaming by edit is possible
    has_threads: bool
    appends: bool = False  # shows an answer as it streams by appending (a terminal): see Adapter.append
    voice_notes: bool = False  # Adapter.send_voice sends a voice note the app plays inline (spoken replies)


@dataclass(frozen=True)
class OutboundVoice:
    """A voice note to send (:meth:`Adapter.send_voice`), neutral like :class:`OutboundText`.

    ``data`` is an OGG file of Opus audio (what Telegram plays as a voice message and Discord requires
    of one); ``duration`` is how long it plays, in seconds; ``waveform`` is its loudness outline, at most
    256 values of 0-255 spread evenly over the note (Discord draws it; Telegram draws its own).
    """

    data: bytes = field(repr=False)
    duration: float
    waveform: bytes = b""


@dataclass(frozen=True)
class SendRate:
    """A limit a platform publishes on outbound operations: at most ``amount`` per ``seconds``, counted
    for the whole bot (``scope`` "bot") or per chat ("chat"). Honoured across processes by the cluster's
    shared send budget (``gateway.cluster.limits.send_budget``); one process leaves pacing to the
    platform SDK."""

    scope: Literal["bot", "chat"]
    amount: int
    seconds: int


@dataclass(frozen=True)
class CommandSpec:
    """A slash command as a platform's menu shows it."""

    name: str  # without the slash
    description: str


class DeliveryError(Exception):
    """A platform refused or failed an outbound operation.

    ``retryable``: the same operation may succeed later (a 429, a 5xx, a dropped connection);
    ``retry_after``: seconds the platform asked to wait; ``bot_wide``: that wait holds for every chat
    of the platform (Discord's global rate limit), not only this one; ``formatting``: the platform
    rejected the entities or markup (resend as plain text); ``permanent``: the chat is gone or the bot
    was removed (stop trying).
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        bot_wide: bool = False,
        formatting: bool = False,
        permanent: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.bot_wide = bot_wide
        self.formatting = formatting
        self.permanent = permanent


InboundSink = Callable[[Sequence[InboundMessage]], Awaitable[None]]
"""The gateway's entry point: returns once the batch is durably handled (see the module docstring)."""


class SinkUnavailable(Exception):
    """The gateway cannot store messages now (its database is unreachable); nothing of the batch was
    stored. Hand it over again later (with a growing pause); the message says why."""


@dataclass
class AdapterStatus:
    """For ``/readyz``: whether the adapter is connected, and the last problem it saw."""

    connected: bool = False
    detail: str = ""
    extra: dict[str, str] = field(default_factory=dict)


class Adapter(ABC):
    """One platform. Implementations: ``adapters.telegram``, ``adapters.discord``, ``adapters.console``.

    Callers may cancel any outbound call (``/stop``, the end of a turn's typing indicator, a
    shutdown): an implementation must leave its HTTP client usable when they do (the Telegram adapter
    lets the request run to its end; its caller stops waiting at once).
    """

    platform: str
    capabilities: Capabilities
    webhook_path: str | None = None  # when set, the gateway's HTTP server routes POSTs here
    only_chat: str | None = None  # set when this instance delivers to one chat of its platform only
    receive_on_demand: bool = False  # start(sink, receive=False) and start_receiving() are supported

    def serves(self, chat_id: str) -> bool:
        """Whether this instance answers ``chat_id``: every chat of its platform, unless ``only_chat``
        says otherwise (each terminal process is its own chat, so none shows another's answers)."""
        return self.only_chat is None or self.only_chat == chat_id

    @abstractmethod
    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Connect and begin handing inbound messages to ``sink`` (returns once started). ``receive``
        False (only for ``receive_on_demand`` adapters): connect for sending; receive once
        :meth:`start_receiving` is called."""

    async def start_receiving(self, allowed: Callable[[], bool] | None = None) -> None:
        """Begin (again) handing inbound messages to the sink given to ``start``; returns once receiving.
        ``allowed``, when given, is asked before each request for more (a ``getUpdates``): while it
        says False none is made (a cluster's leader whose lease may have run out, say after the process
        was paused, must not poll even for a moment). Only ``receive_on_demand`` adapters implement
        it. Raises :class:`DeliveryError`."""
        raise NotImplementedError(f"the {self.platform} adapter receives from start to stop")

    async def stop_receiving(self) -> None:  # noqa: B027 - optional
        """Take no new messages but keep sending (a graceful shutdown delivers queued replies first; a
        process that is no longer elected stops receiving). Confirms nothing the sink did not store."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop everything; confirm nothing that ``sink`` has not stored. Idempotent."""

    async def receive_webhook(self, body: bytes, headers: Mapping[str, str]) -> int:
        """A POST to ``webhook_path``: hand the update to the sink; returns the HTTP status to answer."""
        return 404

    @abstractmethod
    async def send(self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None) -> str:
        """Send one message; returns its platform id. Raises :class:`DeliveryError`."""

    async def send_voice(
        self, address: ChatAddress, voice: OutboundVoice, *, reply_to: str | None = None
    ) -> str:
        """Send one voice note (``capabilities.voice_notes``); returns its platform id. Raises
        :class:`DeliveryError`: not ``retryable`` when the platform will not take a voice note there (the
        gateway then sends the words as text)."""
        raise DeliveryError(f"{self.platform} cannot send voice notes")

    @abstractmethod
    async def edit(self, address: ChatAddress, message_id: str, text: OutboundText) -> None:
        """Replace a sent message's text. Raises :class:`DeliveryError`."""

    @abstractmethod
    async def delete(self, address: ChatAddress, message_id: str) -> None:
        """Delete a sent message (missing already counts as deleted). Raises :class:`DeliveryError`."""

    @abstractmethod
    async def typing(self, address: ChatAddress) -> None:
        """Show "typing…" for a few seconds. Best effort: never raises."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The content of a file that arrived with a message (``attachment.file_id`` from this adapter).

        Raises :class:`DeliveryError`: ``permanent`` when the file is gone or larger than ``max_bytes``
        (nothing is read past it), ``retryable`` for a network failure. May take long for a large file:
        callers bound it with a timeout.
        """
        raise DeliveryError(f"{self.platform} cannot download files", permanent=True)

    async def set_commands(self, commands: list[CommandSpec]) -> None:  # noqa: B027 - optional
        """Publish the command menu (only called when the list changed since the last publish)."""

    async def append(self, address: ChatAddress, text: str) -> None:  # noqa: B027 - optional
        """Show more of the answer being written (only for ``capabilities.appends``). Never raises."""

    async def notice(self, address: ChatAddress, text: str) -> None:  # noqa: B027 - optional
        """A remark about the work, not part of the answer (a retry). Best effort: never raises."""

    def send_rates(self, address: ChatAddress) -> Sequence[SendRate]:
        """The platform's published limits that an operation to ``address`` counts against (none known:
        only 429s pace it)."""
        return ()

    def status(self) -> AdapterStatus:
        """Connection state for the readiness probe."""
        return AdapterStatus()
