"""The adapter seam: platform SDK in, neutral events out (implemented by the gateway issue).

An adapter knows nothing about LLMs, sessions or prompts. It turns platform updates into
``InboundMessage`` and executes neutral outbound operations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class InboundMessage:
    platform: str  # "telegram", "discord", "terminal"
    chat_id: str
    user_id: str
    message_id: str  # the platform's id, used for deduplication
    text: str
    thread_id: str | None = None
    is_direct: bool = False
    mentions_bot: bool = False


InboundHandler = Callable[[InboundMessage], Awaitable[None]]


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


class Adapter(ABC):
    platform: str

    @abstractmethod
    async def start(self, on_message: InboundHandler) -> None:
        """Connect and deliver inbound messages to ``on_message`` until ``stop``."""

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def send(self, chat_id: str, text: str, *, thread_id: str | None = None) -> str:
        """Send ``text`` (already formatted and split to the platform's limits); returns the message id."""

    @abstractmethod
    async def edit(self, chat_id: str, message_id: str, text: str) -> None: ...

    @abstractmethod
    async def typing(self, chat_id: str) -> None: ...
