"""What a dead Socket Mode connection missed, read back from the Web API.

Slack does not resend an event it pushed into a socket that had silently died. After the connection
is replaced, every channel the bot is in is read from its cursor (the ``ts`` of the last message the
gateway stored from it; ``conversations.history``, oldest first), with the replies of threads that
moved since (``conversations.replies``). Whatever was already stored is a duplicate the inbox drops,
so the gap is closed from a point that is surely before it: nothing lost, nothing doubled.

Cursors live in the adapter's record store, so another process of a cluster that takes the socket
over, or a restart, catches up from the same point. A channel with no cursor yet (a person's first DM)
is read from when the last connection opened, also kept there: whatever was written in it since then
was never stored, so it was missed. Before the very first connection there is no such time, and old
history is not answered.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.records import MemoryRecordStore, RecordStore

from .errors import delivery_error
from .settings import RECORDS

FAILURES = (SlackApiError, aiohttp.ClientError, TimeoutError)  # a Web API call that did not answer

WINDOW = 24 * 3600.0  # seconds: a gap older than this is not read back (Slack's own retries ended)
PAGE = 200  # messages or channels per Web API page
MAX_PAGES = 25  # per channel and catch-up: 5,000 messages at most
THREADS_KEPT = 50  # threads remembered per channel as "moved recently", for their replies
CONVERSATION_TYPES = "public_channel,private_channel,mpim,im"
CONNECTED = "connected"  # the record of when the last connection opened


@dataclass(frozen=True)
class Channel:
    id: str
    channel_type: str  # "im", "mpim", "group", "channel": what message events call it


class Cursors:
    """The last stored ``ts`` per channel, and the threads that moved lately (record store backed)."""

    def __init__(self, records: RecordStore | None) -> None:
        self._records = records or MemoryRecordStore(RECORDS)
        self._seen: dict[str, str] = {}  # channel -> ts already written

    async def get(self, channel: str) -> str | None:
        if channel in self._seen:
            return self._seen[channel]
        stored = await self._records.get(f"cursor:{channel}")
        ts = stored.value.get("ts") if stored is not None else None
        return ts if isinstance(ts, str) else None

    async def advance(self, channel: str, ts: str, thread: str | None) -> None:
        """The gateway stored ``ts`` of ``channel`` (in ``thread``)."""
        current = self._seen.get(channel)
        if current is None or float(ts) > float(current):
            await self._records.put(f"cursor:{channel}", {"ts": ts})
            self._seen[channel] = ts
        if thread:
            await self._remember_thread(channel, thread)

    async def last_connected(self) -> float | None:
        """When the last Socket Mode connection (of this process or another) opened, if one did."""
        stored = await self._records.get(CONNECTED)
        at = stored.value.get("at") if stored is not None else None
        return float(at) if isinstance(at, (int, float)) else None

    async def connected(self, at: float) -> None:
        """A connection opened at ``at`` and what came before it was caught up."""
        await self._records.put(CONNECTED, {"at": at})

    async def threads(self, channel: str) -> list[str]:
        stored = await self._records.get(f"threads:{channel}")
        listed = stored.value.get("threads") if stored is not None else None
        return [str(ts) for ts in listed] if isinstance(listed, list) else []

    async def _remember_thread(self, channel: str, thread: str) -> None:
        known = await self.threads(channel)
        if known and known[-1] == thread:
            return
        kept = [*[ts for ts in known if ts != thread][-(THREADS_KEPT - 1) :], thread]
        await self._records.put(f"threads:{channel}", {"threads": kept})


async def channels_of_bot(client: AsyncWebClient) -> list[Channel]:
    """Every conversation the bot is a member of (``users.conversations``); a failure is a
    :class:`DeliveryError` that names the call."""
    found: list[Channel] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        try:
            page = await client.users_conversations(
                types=CONVERSATION_TYPES, limit=PAGE, exclude_archived=True, cursor=cursor
            )
        except FAILURES as exc:
            raise delivery_error(exc, "users.conversations") from exc
        for conversation in page.get("channels") or ():
            found.append(Channel(str(conversation["id"]), channel_type(conversation)))
        cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            break
    return found


def channel_type(conversation: Mapping[str, Any]) -> str:
    if conversation.get("is_im"):
        return "im"
    if conversation.get("is_mpim"):
        return "mpim"
    return "group" if conversation.get("is_private") else "channel"


async def missed(
    client: AsyncWebClient, channel: Channel, oldest: str, known_threads: Sequence[str]
) -> list[dict[str, Any]]:
    """The channel's messages after ``oldest`` (threads' replies included), oldest first, each as a
    message event (``channel`` and ``channel_type`` filled in). A failure is a :class:`DeliveryError`
    that names the call."""
    oldest = max(float(oldest), time.time() - WINDOW).__format__(".6f")
    by_ts: dict[str, dict[str, Any]] = {}
    threads = set(known_threads)
    history = await _pages(
        client.conversations_history, "conversations.history", channel=channel.id, oldest=oldest
    )
    for message in history:
        by_ts[str(message["ts"])] = message
        if message.get("reply_count") and float(message.get("latest_reply") or 0) > float(oldest):
            threads.add(str(message["ts"]))
    for thread in sorted(threads):
        replies = await _pages(
            client.conversations_replies, "conversations.replies", channel=channel.id, ts=thread,
            oldest=oldest,
        )  # fmt: skip
        for message in replies:
            if float(message["ts"]) > float(oldest):
                by_ts.setdefault(str(message["ts"]), message)
    return [
        {"type": "message", **message, "channel": channel.id, "channel_type": channel.channel_type}
        for _, message in sorted(by_ts.items(), key=lambda item: float(item[0]))
    ]


async def _pages(method: Any, name: str, **arguments: Any) -> list[dict[str, Any]]:
    """Every page of the Web API call ``name`` (``method``), up to :data:`MAX_PAGES`."""
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        try:
            page = await method(limit=PAGE, inclusive=False, cursor=cursor, **arguments)
        except FAILURES as exc:
            raise delivery_error(exc, name) from exc
        messages.extend(m for m in page.get("messages") or () if isinstance(m, dict) and "ts" in m)
        cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor or not page.get("has_more", True):
            break
    return messages
