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
