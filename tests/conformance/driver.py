"""What a platform gives the conformance suite: a :class:`Driver` for its fake, and the suite's view of
what the bot sent (:class:`Seen`).

A driver speaks the fake's language so the scenarios never do. Ids are text, as the gateway sees them.
A :class:`Place` is where people write and where the bot answers: a direct chat, a shared chat, or a
thread (topic) of one. A driver holds one fake for its whole life (one scenario), also across the
gateway's restarts.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Any

from adapters.base import Adapter, ChatAddress
from adapters.spec import PlatformSpec


@dataclass(frozen=True)
class Place:
    """A chat (and a thread of it) on the platform: where a message is written and a reply goes."""

    chat_id: str
    thread_id: str | None = None

    def address(self, platform: str) -> ChatAddress:
        return ChatAddress(platform, self.chat_id, self.thread_id)


@dataclass(frozen=True)
class Sent:
    """A message a person sent through the fake (what :meth:`Driver.redeliver` delivers again)."""

    place: Place
    message_id: str
    raw: Any = None  # the fake's own record of it (an update, a payload)


@dataclass(frozen=True)
class Seen:
    """One message of the bot as a person sees it now (deleted ones are not seen)."""

    message_id: str
    text: str  # the words shown, without markup
    code: tuple[tuple[str | None, str], ...]  # each code block shown: (language, its text)
    bold: tuple[str, ...]  # each span shown in bold
    length: int  # of the message as sent, in the platform's unit (what its limit counts)
    versions: int  # how many texts it showed (1: never edited)


class Driver(ABC):
    """How the suite drives one platform's fake. People: ``admin`` (in ``gateway.admins``), ``friend``
    (in the platform's allowlist) and ``stranger`` (neither)."""

    spec: PlatformSpec[Any]  # the registration under test
    absent: Mapping[str, str] = {}  # what the platform does not have, each with why (the suite skips it):
    # "shared chats", "rate limits" (a retry-after to honour), "command menu", "pairing" (a stranger's code)
    admin: str
    friend: str
    stranger: str
    rate_limit_burst: int  # 429s in a row the adapter waits out itself before the gateway's budget must
    shared_chats: bool = True  # False: direct chats only (the group and thread scenarios do not apply)
    edits: bool = True  # False: the platform cannot edit a sent message (an answer arrives whole)

    def gateway_section(self) -> dict[str, Any]:
        """Settings of the gateway section the platform needs (a webhook's fake: the port it POSTs to)."""
        return {}

    # --- the fake ---------------------------------------------------------------------------------

    @abstractmethod
    def serving(self) -> AbstractAsyncContextManager[dict[str, Any]]:
        """The fake on 127.0.0.1 in this event loop; yields the platform's config section pointing at
        it (the friend allowed)."""

    @abstractmethod
    def serving_in_thread(self) -> AbstractContextManager[dict[str, Any]]:
        """The same, on a thread of its own, for a gateway in another process."""

    @abstractmethod
    def environ(self) -> dict[str, str]:
        """The variables that enable the platform (its token...)."""

    @abstractmethod
    async def delivered(self, adapter: Adapter) -> None:
        """Wait until everything people wrote so far has been handed to the gateway by ``adapter``
        (Telegram: every update confirmed, which the adapter does only once the inbox stored it;
        Discord: every event read by discord.py and none waiting in the adapter's inbound queue)."""

    @abstractmethod
    def receiving(self) -> bool:
        """A gateway (maybe in another process) asks the fake for messages now: what people write from
        here on reaches it."""

    # --- what people do ---------------------------------------------------------------------------

    @abstractmethod
    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        """``user`` writes to the bot in their direct chat, with a file (name, bytes) or a photo."""

    @abstractmethod
    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        """``user`` writes in the shared chat (``place``: a thread of it), mentioning the bot or not."""

    @abstractmethod
    def thread(self) -> Place:
        """A new thread (topic) of the shared chat."""

    @abstractmethod
    def command(self, user: str, name: str, place: Place) -> Sent:
        """``user`` invokes ``/name`` as the platform lets them (a message, a slash command)."""

    @abstractmethod
    async def redeliver(self, sent: Sent) -> None:
        """The platform delivers ``sent`` again (a restarted poller, a resumed session, a retry)."""

    @abstractmethod
    def fail_sends(self, count: int, retry_after: float) -> None:
        """The next ``count`` message sends are refused with a 429 asking to wait ``retry_after``."""

    # --- what the bot did -------------------------------------------------------------------------

    @abstractmethod
    def dm_place(self, user: str) -> Place:
        """The direct chat of ``user`` with the bot."""

    @abstractmethod
    def group_place(self) -> Place:
        """The shared chat the suite writes in."""

    @abstractmethod
    def messages(self, place: Place) -> list[Seen]:
        """The bot's visible messages there (for a chat without thread: not those of its threads)."""

    @abstractmethod
    def send_times(self) -> list[float]:
        """``time.monotonic()`` of every message send the fake received, refused ones included."""

    @abstractmethod
    def published_commands(self) -> set[str]:
        """The command names the platform's menu shows now."""

    @abstractmethod
    def files(self, place: Place) -> list[tuple[str, bytes]]:
        """The files the bot sent there: (name, content)."""


_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)\n```$", re.S | re.M)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.S)


def markdown_code(content: str) -> tuple[tuple[str | None, str], ...]:
    """The fenced code blocks a platform that shows Markdown renders: (language, text)."""
    return tuple((match.group(1).strip() or None, match.group(2)) for match in _FENCE.finditer(content))


def markdown_bold(content: str) -> tuple[str, ...]:
    return tuple(match.group(1) for match in _BOLD.finditer(_FENCE.sub("", content)))


def markdown_words(content: str) -> str:
    """The words of Markdown as shown: fences and bold markers removed."""
    return _FENCE.sub(lambda m: m.group(2), content).replace("**", "")
