"""The adapter contract: a platform SDK on one side, neutral messages and operations on the other.

An adapter knows nothing about LLMs, sessions, prompts or authorization (it imports neither the agent
nor the gateway). It turns platform updates into :class:`InboundMessage` and hands them to the
gateway's :data:`InboundSink`; it executes neutral outbound operations (send, edit, delete, typing,
files) and reports failures as :class:`DeliveryError`. How the gateway finds, configures and builds an
adapter is its platform's registration (``adapters.spec``, listed in ``adapters.registry``); the
conformance suite (``tests/conformance``) runs the same scenarios against every adapter through its
platform's fake. Below, what an adapter must do, topic by topic; the methods' docstrings say what a
caller may assume and what may be raised.

**Receive, normalise, store before acknowledging (the inbox).** The sink takes a batch (what one
``getUpdates`` brought, one webhook POST, one gateway event) and returns only once every message of it
is durably recorded in the gateway's inbox (or deliberately dropped: not addressed, not allowed), in
one transaction. An adapter acknowledges messages to its platform (advances a polling offset, answers
a webhook with 2xx, acks an envelope, stores a sync token) only after the sink returned; if the sink
raises, none of the batch is acknowledged and the platform delivers it again. :class:`SinkUnavailable`
says the gateway cannot store now (its database is unreachable): hand the batch over again later, and
keep what the platform will not send again; any other exception is a failure worth a log line with its
traceback. A platform that never redelivers (Discord) retries the sink itself. :class:`SinkRetry` is
how every adapter retries (the pauses, the log lines). Messages of one chat are handed over in the
platform's order, one batch at a time. Normalising means: no platform type
crosses the seam; names go through ``adapters.names.clean_name``; the bot's own messages and the
platform's system messages are not handed over; ``addressed`` says the message is meant for the bot (a
mention, a reply to one of its messages, a command aimed at it, a chat it answers freely).

**Address chats, threads and people.** ``InboundMessage.chat_id`` names the chat a reply goes to,
``thread_id`` a topic or thread inside it (a thread is its own session, and replies stay in it);
``user_id`` the person, unique on the platform (``platform:user_id`` is how ``gateway.admins`` and
pairings name them); ``server_id`` the server, workspace or guild of a shared chat and
``parent_chat_id`` the channel a thread belongs to (allowlists follow them). ``message_id`` is unique
within ``(platform, chat_id)``: it is what makes a redelivery a duplicate. The gateway answers to
:class:`ChatAddress` (chat and thread), never to a platform object, so an answer can go out after a
restart or from another process. ``chat_type`` says whether the chat is DIRECT (every message is
addressed), GROUP (answered when addressed, unless the platform's ``require_mention`` is off), or a
CHANNEL (not answered).

**Render and split (capabilities choose the renderer).** The gateway sanitizes a model's Markdown
(valid Unicode, ``\n`` line ends, no control characters but tab and newline) and hands it to
``Capabilities.render`` with ``max_message_length``: the renderer returns the messages that show it,
each within the limit as the platform counts it (``length_unit``), and ``[]`` for blank text. It is a
pure function built from ``adapters.text`` (Markdown passed through and split with code fences
repaired, or converted to text plus entities and split after converting, so nothing added later can
push a part over the limit). ``send``/``edit`` get parts the renderer made and never re-split them.

**Send, edit, stream.** ``send`` returns the new message's id; ``edit`` replaces a message's text
("not modified" is success); ``delete`` counts a missing message as deleted. The gateway streams an
answer by editing one message (``can_edit``) at most once per ``gateway.stream_edit_interval``, moving
to a new message when the text outgrows the limit, and then delivers the final parts through its outbox
(recorded before sent, marked after): a terminal that ``appends`` gets :meth:`Adapter.append` instead.
``reply_to`` (a message id of the chat) makes the first part a reply where the platform has replies.
Mentions in an answer never ping anyone but, at most, the person replied to.

**Files in and out.** A file that came with a message is an :class:`Attachment`; the gateway fetches
it with :meth:`Adapter.download` only when it needs it, bounded by ``gateway.max_attachment_mb``.
A file goes out with :meth:`Adapter.send_file` (:class:`OutboundFile`), up to
``Capabilities.max_file_bytes`` (None: the platform cannot take files from the bot). A spoken reply
goes out with :meth:`Adapter.send_voice` (only where ``Capabilities.voice_notes``), already encoded as
the platforms want it (:class:`OutboundVoice`: OGG/Opus).

**Commands from the one table.** Commands are not the adapter's business beyond the menu: the gateway's
one table (``gateway.commands``) is published with :meth:`Adapter.set_commands` (only when it changed
since the last publish), and a command a person invokes arrives as an ordinary message whose text is
``/name args`` (a Discord slash command, a Slack slash command, ``/name@bot`` in a Telegram group all
become that). A command whose reply only its asker should see is in the build context's
``private_commands`` (answered ephemerally where the platform can).

**Rate limits through the shared send pacing.** An adapter does not sleep through long rate limits:
a 429 leaves as a :class:`DeliveryError` with ``retry_after`` (and ``bot_wide`` when the limit is the
bot's, not the chat's), and the gateway's send pacing pauses that chat (or every chat of the platform)
for every sender, across the processes of a cluster. :meth:`Adapter.send_rates` declares the limits a
platform publishes (per bot, per chat), which a cluster counts in Redis; an SDK's own short pacing
inside one request is fine.

**Idempotent replay.** Everything may happen twice: the platform redelivers (the inbox deduplicates by
``message_id``); the outbox re-sends an operation whose result was not recorded (a crash between send
and mark); a restart replays stored, unanswered messages. An adapter keeps no state that a restart
loses and a reply needs: what it must remember beyond a message (Discord's deferred slash commands)
goes to the record store it was given (``adapters.records``). ``start``/``stop`` may be called again
after a stop in a new process; ``stop`` confirms nothing the sink did not store.

**Delivery keys.** ``send``, ``send_voice`` and ``edit`` take a ``key``: the same for every attempt of
one delivery (an outbox item, from any process, before and after a restart), different for every other
(at most 25 characters of ``[0-9a-z-]``; None: a send nobody will repeat, such as a streamed part). A
platform that deduplicates by a key the client chooses sends once however often it is called with
one, and answers the first message's id again: Matrix (the transaction id of the event), Discord (the
message's nonce, enforced). That closes the window the outbox alone cannot: the platform accepted a
send, and the process died or the answer was lost before it was recorded. An adapter whose platform
cannot deduplicate ignores the key (Telegram, Slack, WhatsApp, Signal, the terminal; email derives
its ``Message-ID`` from it, which some mail programs, Gmail among them, show once). A send the
platform refused uses up no key on those platforms (Synapse forgets a transaction that failed; Discord
keeps the nonces of messages it created), so the outbox keeps an item's key when it sends the item
again in another form: plain text after refused formatting, the words of a refused voice note, a new
message for an edit whose message is gone.

**Lifecycle.** ``start`` and ``stop`` are called once each by the gateway's lifecycle; an adapter may be
called from several tasks at once (different chats). **Receiving on demand:** some platforms let only
one connection per bot receive (Telegram's ``getUpdates``, Discord's gateway, Slack's Socket Mode). An
adapter for one sets ``receive_on_demand``: ``start(sink, receive=False)`` connects for sending only,
and ``start_receiving``/``stop_receiving`` turn receiving on and off any number of times while sending
goes on; several processes of one bot then all send, and the one the gateway elects receives (an
adapter whose receiving is split into shards is spread over the processes, see
``gateway.cluster.leases.shards``). **Webhooks:** an adapter with ``webhook_path`` gets the POSTs the
gateway's HTTP server receives there (:meth:`Adapter.receive_webhook`), and its GETs
(:meth:`Adapter.verify_webhook`: a platform that proves the URL is yours with a challenge first).

**Delivery reports.** A platform that later says what became of a message it accepted (delivered,
read, failed: a status webhook) hands that to :attr:`Adapter.status_sink` as :class:`DeliveryStatus`
(the gateway sets it before ``start``; it records each on the outbox item that sent the message, which
a failure also marks failed). A reply the platform will not take at all is a ``DeliveryError`` as ever.

**Buttons.** An adapter whose ``Capabilities.buttons`` is true shows ``OutboundText.buttons`` under
the message it sends (Telegram's inline keyboard, Discord's components, a question in the terminal);
an edit of that message with no buttons removes them. A press is handed to the sink as an
:class:`InboundMessage` from the presser: ``text`` is the button's ``command`` (exactly what typing it
would do), ``message_id`` the press's own id (unique in the chat), ``reply_to_id`` the message with the
buttons, ``addressed`` true. A reply to the press (``send`` with ``reply_to`` its id) answers the press
itself where the platform allows (Telegram: ``answerCallbackQuery``, a note only the presser sees;
Discord: the deferred, ephemeral interaction response), else it is an ordinary message.

**Extending the contract.** A new ability is a field of :class:`Capabilities` that says whether the
platform has it (default False or None) plus an optional method with a default that refuses
(``DeliveryError``, not retryable) or does nothing: the gateway asks the capability before calling, so
adapters that lack the ability need no change (``send_file`` and ``max_file_bytes`` are built so).
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from resilience.backoff import Backoff, Streak
from resilience.unreachable import Unreachable


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
    server_id: str | None = None  # the server (a guild, a workspace) a shared chat belongs to
    parent_chat_id: str | None = None  # the channel a thread belongs to (a thread is a chat of its own)


@dataclass(frozen=True)
class ChatAddress:
    """Where a reply goes: a chat, and a topic or thread within it (the ``chat_id`` and ``thread_id`` of
    the message it answers: a thread's replies stay in the thread)."""

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
class Button:
    """A button under a message: pressing it is the presser sending ``command`` in that chat."""

    label: str
    command: str  # a slash command of at most 64 bytes (Telegram's limit for callback data)
    shortcut: str | None = None  # the key a terminal takes for it ("y"); the end of input takes "n"


@dataclass(frozen=True)
class OutboundText:
    """Plain text plus formatting entities: one message, already within the platform's limit.

    Neutral on purpose: adapters convert it to their SDK's types, so the gateway never imports one.
    ``buttons`` are shown under it where the platform can (``Capabilities.buttons``); see the module.
    """

    text: str
    entities: tuple[TextEntity, ...] = ()
    buttons: tuple[Button, ...] = ()


Renderer = Callable[[str, int], Sequence[OutboundText]]
"""A platform's renderer: ``(markdown, limit)`` → the messages that show it, each within ``limit``.

``markdown`` is sanitized (valid Unicode, ``\n`` line ends, no control characters but tab and newline).
A renderer is pure and total: it never raises for any such text (``ValueError`` only for a ``limit``
too small to hold one character), returns ``[]`` for blank text, and loses no word of it."""


@dataclass(frozen=True)
class OutboundFile:
    """A file to send (:meth:`Adapter.send_file`), neutral like :class:`OutboundText`."""

    name: str  # as the chat shows it: "report.pdf"
    data: bytes = field(repr=False)
    mime_type: str = "application/octet-stream"


@dataclass(frozen=True)
class Capabilities:
    """What the gateway must know to render, split, stream and send for a platform."""

    max_message_length: int  # per message, in ``length_unit``
    length_unit: Literal["utf16", "chars"]  # how the platform counts that limit
    render: Renderer  # the platform's renderer (``adapters.text.markdown.render_markdown``...)
    can_edit: bool  # streaming by edit is possible
    has_threads: bool  # ChatAddress.thread_id means something here
    appends: bool = False  # shows an answer as it streams by appending (a terminal): see Adapter.append
    max_file_bytes: int | None = None  # the largest file send_file takes; None: no files out
    voice_notes: bool = False  # Adapter.send_voice sends a voice note the app plays inline (spoken replies)
    buttons: bool = False  # shows OutboundText.buttons and hands their presses to the sink


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
    shared send pacing (``gateway.cluster.counting.pacing``); one process leaves pacing to the
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


@dataclass(frozen=True)
class DeliveryStatus:
    """What the platform later said about a message it accepted (a status webhook): ``message_id`` is
    what ``send`` returned; ``error`` says why, for "failed", in words an owner can act on."""

    platform: str
    chat_id: str
    message_id: str
    status: Literal["sent", "delivered", "read", "failed"]
    error: str | None = None


StatusSink = Callable[[Sequence[DeliveryStatus]], Awaitable[None]]
"""Where an adapter hands delivery reports (see the module docstring); returns once they are recorded."""

InboundSink = Callable[[Sequence[InboundMessage]], Awaitable[None]]
"""The gateway's entry point: returns once the batch is durably handled (see the module docstring)."""


class SinkUnavailable(Exception):
    """The gateway cannot store messages now (its database is unreachable); nothing of the batch was
    stored. Hand it over again later (with a growing pause); the message says why."""


Hand = Callable[[], Awaitable[None]]
"""One try at storing a batch: the sink call, with whatever must come before it (a record it needs)."""

STORE_AWAY = (SinkUnavailable, Unreachable)  # the gateway's store cannot be reached: no bug, wait it out


def _always() -> bool:
    return True


class SinkRetry:
    """How an adapter hands a batch to the sink again while it fails (the contract above), in one place.

    The pauses are the one :class:`~resilience.backoff.Backoff`'s, growing while the sink keeps failing.
    The first failure of a streak is logged (a store that is away, :data:`STORE_AWAY`, as a warning
    without a traceback: no bug; anything else as an error with it), the next ones at debug, and the
    recovery once, all on the adapter's ``log``. ``describe`` words an exception (an adapter's own strips
    its token); ``status``, when given, shows the failure as its ``detail``. ``sleep`` and ``rng`` are
    for tests (a fake clock, fixed jitter).

    :meth:`attempt` is for a platform that delivers a batch again (Telegram's offset, Matrix's sync
    token, unread mail): one try, then the pause, and the caller fetches again. :meth:`until_stored` is
    for one that never does (Discord, Signal, Slack's socket): it holds the batch until it is stored.
    """

    def __init__(
        self,
        backoff: Backoff,
        *,
        log: logging.Logger,
        describe: Callable[[Exception], str] = str,
        status: AdapterStatus | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.streak = Streak(backoff, rng or random.Random())
        self._log = log
        self._describe = describe
        self._status = status
        self._sleep = sleep
        self._delay = 0.0  # the pause after the last failure

    async def attempt(self, hand: Hand, what: str, *, pause: bool = True) -> bool:
        """One try of ``hand`` (``what``, in words: "Telegram updates 5-7"): True once it returned;
        False when it raised, after the pause (``pause`` False: the caller waits, with :meth:`pause`)."""
        try:
            await hand()
        except Exception as exc:
            self._failed(exc, what)
            if pause:
                await self.pause()
            return False
        self._stored(what)
        return True

    async def until_stored(
        self, hand: Hand, what: str, *, tries: int = 1, going_on: Callable[[], bool] = _always
    ) -> bool:
        """Try ``hand`` until it returns (True). A store that is away is waited out for as long as
        ``going_on()`` says (the adapter still receives; False then). Any other failure is tried
        ``tries`` times in all: then the batch is lost (logged as an error; False)."""
        others = 0
        while going_on():
            try:
                await hand()
            except STORE_AWAY as exc:
                self._failed(exc, what)
            except Exception as exc:
                others += 1
                if others >= tries:
                    failures = self.streak.reset() + 1
                    times = "once" if failures == 1 else f"{failures} times"
                    self._log.error("Storing %s failed %s; it is lost", what, times, exc_info=True)
                    if self._status is not None:
                        self._status.detail = f"{what} not stored: {self._describe(exc)}"
                    return False
                self._failed(exc, what)
            else:
                self._stored(what)
                return True
            await self.pause()
        return False

    async def pause(self) -> None:
        """Wait as long as the backoff says after the failures so far."""
        await self._sleep(self._delay)

    def _failed(self, exc: Exception, what: str) -> None:
        self._delay = self.streak.next_delay()
        text = self._describe(exc)
        if self._status is not None:
            self._status.detail = f"{what} not stored yet: {text}"
        if self.streak.failures > 1:
            self._log.debug("Storing %s failed again: %s", what, text)
            return
        away = isinstance(exc, STORE_AWAY)
        self._log.log(
            logging.WARNING if away else logging.ERROR,
            "Storing %s failed (%s); trying again",
            what,
            text,
            exc_info=not away,
        )

    def _stored(self, what: str) -> None:
        failures = self.streak.reset()
        if failures:
            self._log.info("Stored %s after %d failed attempt(s)", what, failures)


@dataclass(frozen=True)
class WebhookReply:
    """What the gateway's HTTP server answers a webhook POST with (:meth:`Adapter.receive_webhook`)."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain"


@dataclass
class AdapterStatus:
    """For ``/readyz``: whether the adapter is connected, and the last problem it saw."""

    connected: bool = False
    detail: str = ""
    extra: dict[str, str] = field(default_factory=dict)


class Adapter(ABC):
    """One platform (the module docstring says what every adapter keeps). Implementations: one per
    folder of ``adapters.registry`` (``adapters.telegram``, ``adapters.discord``), and the terminal's
    ``adapters.terminal``.

    Callers may cancel any outbound call (``/stop``, the end of a turn's typing indicator, a
    shutdown): an implementation must leave its HTTP client usable when they do (the Telegram adapter
    lets the request run to its end; its caller stops waiting at once). Every outbound call is bounded
    by a timeout of the adapter's own.
    """

    platform: str
    capabilities: Capabilities
    webhook_path: str | None = None  # when set, the gateway's HTTP server routes POSTs here
    only_chat: str | None = None  # set when this instance delivers to one chat of its platform only
    receive_on_demand: bool = False  # start(sink, receive=False) and start_receiving() are supported
    prompt_hint: str = ""  # how the model should write here (stable prompt layer: never per chat)
    status_sink: StatusSink | None = None  # set by the gateway: where delivery reports go

    def serves(self, chat_id: str) -> bool:
        """Whether this instance answers ``chat_id``: every chat of its platform, unless ``only_chat``
        says otherwise (each terminal process is its own chat, so none shows another's answers)."""
        return self.only_chat is None or self.only_chat == chat_id

    @abstractmethod
    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Connect and begin handing inbound messages to ``sink`` (returns once started). ``receive``
        False (only for ``receive_on_demand`` adapters): connect for sending; receive once
        :meth:`start_receiving` is called. Raises :class:`DeliveryError`: not ``retryable`` when a
        setting or the token is wrong (the message says what to fix), ``retryable`` for network
        trouble; then nothing is left running."""

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

    async def receive_webhook(self, body: bytes, headers: Mapping[str, str]) -> WebhookReply:
        """A POST to ``webhook_path``: judge it (its signature or secret first: a forged one never reaches
        the sink), hand what it carries to the sink, and say what to answer: 2xx only once the sink
        returned (the platform redelivers otherwise). Never raises."""
        return WebhookReply(404)

    async def verify_webhook(self, query: Mapping[str, str]) -> WebhookReply:
        """A GET of ``webhook_path`` (its query parameters): a platform's check that the URL is this bot's
        (answer its challenge only when its token is right). Never raises."""
        return WebhookReply(405)

    @abstractmethod
    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """Send one message (a part the renderer made: within the limit) to ``address``, in its thread;
        ``reply_to`` (a message of that chat) makes it a reply where the platform has replies. Returns
        the new message's id (what ``edit``/``delete`` take). ``key``: the delivery's key (see the
        module docstring): called again with it, a platform that deduplicates returns the same message's
        id and shows one message. Raises :class:`DeliveryError`; then nothing was sent, or the gateway
        cannot know (a timeout: it may send again, with the same key)."""

    async def send_voice(
        self,
        address: ChatAddress,
        voice: OutboundVoice,
        *,
        reply_to: str | None = None,
        key: str | None = None,
    ) -> str:
        """Send one voice note (``capabilities.voice_notes``); returns its platform id. ``key`` as for
        :meth:`send`. Raises :class:`DeliveryError`: not ``retryable`` when the platform will not take a
        voice note there (the gateway then sends the words as text, with the same key)."""
        raise DeliveryError(f"{self.platform} cannot send voice notes")

    @abstractmethod
    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        """Replace a sent message's text; the same text again is no error. ``key`` as for :meth:`send`
        (an edit that is an event of its own, Matrix's, is made once). Raises :class:`DeliveryError`
        (``permanent`` when the message is gone: the gateway then sends the text anew)."""

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

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        """Send one file (at most ``capabilities.max_file_bytes``) to ``address``; returns its message's
        id. Raises :class:`DeliveryError`: not ``retryable`` when the platform will not take it (too
        large, not allowed there), ``retryable`` for what may pass later (a 429, the network)."""
        raise DeliveryError(f"{self.platform} cannot send files", permanent=True)

    async def set_commands(self, commands: list[CommandSpec]) -> None:  # noqa: B027 - optional
        """Publish the command menu (the gateway's one table, ``gateway.commands.menu``; only called when
        it changed since the last publish). A name the platform refuses is left out with a warning
        rather than failing the menu. Raises :class:`DeliveryError` (the gateway tries at the next
        start)."""

    async def append(self, address: ChatAddress, text: str) -> None:  # noqa: B027 - optional
        """Show more of the answer being written (only for ``capabilities.appends``). Never raises."""

    async def notice(self, address: ChatAddress, text: str) -> None:  # noqa: B027 - optional
        """A remark about the work, not part of the answer (a retry). Best effort: never raises."""

    def send_rates(self, address: ChatAddress) -> Sequence[SendRate]:
        """The platform's published limits that an operation to ``address`` counts against (none known:
        only 429s pace it). Pure: the shared send pacing calls it before each operation."""
        return ()

    def status(self) -> AdapterStatus:
        """Connection state for the readiness probe."""
        return AdapterStatus()
