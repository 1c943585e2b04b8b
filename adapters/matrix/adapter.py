"""``MatrixAdapter``: the bot's account on a homeserver, through mautrix's client-server API.

Receiving is one ``/sync`` loop (``receive_on_demand``: in a cluster the elected process syncs, every
process sends). Store before confirm, on Matrix: the sync token (``next_batch``) is the confirmation.
A batch's messages go to the sink first; only once it returned is the token of that batch kept (in
the record store, so a restart or another process of the cluster goes on from it): a crash before
that syncs the same batch again, and the gateway's inbox drops what it already has. The very first
sync of a bot (no token kept yet) only takes the token: history from before the bot started is not
answered, nor a room's history from before the bot was invited to it (which the homeserver shows
when the bot joins).

Invites are accepted from ``gateway.admins`` and ``matrix.allowed_users``, and to the rooms of
``matrix.allowed_rooms``; any other is declined at once (nothing else is done for it). Encrypted rooms
are not supported: in one (invited to, or encryption turned on later) the bot says so in a notice
and leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

import aiohttp
from mautrix.api import Method, Path
from mautrix.client import ClientAPI
from mautrix.errors import MatrixRequestError, MForbidden, MNotFound
from mautrix.errors.request import MUnknownToken
from mautrix.types import EventID, RoomID, UserID

from adapters.base import (
    Adapter,
    AdapterStatus,
    Attachment,
    Capabilities,
    ChatAddress,
    CommandSpec,
    DeliveryError,
    InboundMessage,
    InboundSink,
    OutboundFile,
    OutboundText,
    SinkRetry,
)
from adapters.reconnect import Reconnect
from adapters.records import MemoryRecordStore, RecordStore
from adapters.text.markdown import render_markdown
from resilience.backoff import Backoff, Streak
from resilience.loops import BackgroundLoop
from resilience.unreachable import Unreachable

from .client import NETWORK_ERRORS, HeraldHTTPAPI, delivery_error
from .formatted import to_html
from .inbound import (
    ENCRYPTED,
    Invite,
    RoomEvents,
    SyncBatch,
    command_of,
    is_message,
    mentions,
    read_sync,
    relations,
    since_invited,
    to_inbound,
)
from .settings import PLATFORM, RECORDS

log = logging.getLogger(__name__)

MAX_MESSAGE = 4000  # characters of Markdown per message: its HTML stays far below Matrix's 64 KiB event
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # Synapse's default max_upload_size
START_TIMEOUT = 30.0
SYNCING = "Matrix sync"  # the sync loop's link, as the log and the status name it
REQUEST_TIMEOUT = 60.0
TRANSFER_TIMEOUT = 120.0  # one upload or download
SYNC_WAIT = 30.0  # seconds the homeserver holds a sync open when nothing happens
SYNC_SLACK = 15.0  # on top of SYNC_WAIT before a sync counts as lost
TYPING_MS = 5000
NOT_ALLOWED_PAUSE = 0.05
TOKEN_KEY = "sync"
AUTHENTICATED_MEDIA = 11  # spec v1.11 moved media downloads behind the access token
KNOWN_OWN = 10_000  # ids of the bot's own recent messages kept to recognise replies to it
GAP_PAGES = 20  # pages of 100 fetched to fill a cut timeline
COMMANDS_TYPE = "io.herald.commands"  # account data listing the commands (Matrix has no command menu)
NO_PRESENCE = {"presence": {"not_types": ["*"]}, "account_data": {"not_types": ["*"]}}
TOKEN_REFRESH = 60.0  # seconds: a sync with nothing to store keeps its token at most this often
SYNC_LIMIT = 50  # timeline events per room and sync (a longer gap is paged in from the room's history)


def sync_filter(me: str, *, first: bool) -> str:
    """The sync filter: no presence, typing or account data; not the bot's own events (its sends would
    wake the sync for nothing); the first sync only takes the token (one event per room, unread)."""
    timeline = {"limit": 1 if first else SYNC_LIMIT, "not_senders": [me]}
    return json.dumps({**NO_PRESENCE, "room": {"timeline": timeline, "ephemeral": {"not_types": ["*"]}}})


ENCRYPTED_NOTICE = (
    "I cannot read this room: it is end-to-end encrypted, and Herald does not support encryption. "
    "Talk to me in a room (or a direct chat) without encryption. I am leaving this room."
)
DECLINED = "Not allowed to use this bot."


class MatrixAdapter(Adapter):
    """Matrix through mautrix 0.21 (client-server API, no encryption): direct chats and rooms, threads
    (``m.thread``), HTML from Markdown, streaming by edits (``m.replace``), media in and out.

    ``homeserver``: the client-server API's base URL; ``token``: the bot account's access token.
    ``invite_from``/``invite_to``: whose invites and invites to which rooms are accepted.
    ``records``: where the sync token is kept (default: in memory, lost at a restart).
    """

    platform = PLATFORM
    receive_on_demand = True
    prompt_hint = (
        "You are talking with people in Matrix. Your Markdown is shown formatted (bold, italics, lists, "
        "links, tables, code blocks with a language); messages over 4000 characters are split."
    )
    capabilities = Capabilities(
        max_message_length=MAX_MESSAGE,
        length_unit="chars",
        render=render_markdown,
        can_edit=True,
        has_threads=True,
        max_file_bytes=MAX_UPLOAD_BYTES,
    )

    def __init__(
        self,
        homeserver: str,
        token: str,
        *,
        invite_from: Collection[str] = (),
        invite_to: Collection[str] = (),
        records: RecordStore | None = None,
        sync_wait: float = SYNC_WAIT,
        request_timeout: float = REQUEST_TIMEOUT,
        retry_base: float = 0.5,
        retry_cap: float = 30.0,
    ) -> None:
        if not token.strip():
            raise ValueError("the Matrix access token is empty")
        self._homeserver = homeserver.rstrip("/")
        self._token = token.strip()
        self._invite_from = frozenset(invite_from)
        self._invite_to = frozenset(invite_to)
        self._records = records if records is not None else MemoryRecordStore(RECORDS)
        self._sync_wait = sync_wait
        self._request_timeout = request_timeout
        backoff = Backoff(retry_base, max(retry_base, retry_cap))
        self._token_backoff = Streak(backoff)
        self._backoff = backoff
        self._api: HeraldHTTPAPI | None = None
        self._client: ClientAPI | None = None
        self._me = ""
        self._my_name = ""
        self._authenticated_media = True
        self._sink: InboundSink | None = None
        self._allowed: Callable[[], bool] | None = None
        self._sync: BackgroundLoop | None = None
        self._first_sync = asyncio.Event()
        self._members: dict[str, dict[str, str]] = {}  # room -> joined member -> display name
        self._refused: set[str] = set()  # encrypted rooms the bot said it cannot read
        self._own: OrderedDict[str, None] = OrderedDict()  # the bot's recent message ids
        self._commands: frozenset[str] = frozenset()
        self._token_kept = -TOKEN_REFRESH  # time.monotonic() the sync token was last written
        self._status = AdapterStatus()  # signed in (until stop)
        self._syncing = AdapterStatus()  # the running sync loop's: its last sync (see status())
        self._sink_retry = SinkRetry(backoff, log=log, status=self._syncing)  # the next sync repeats a batch
        self._link = Reconnect(backoff, SYNCING, log=log, status=self._syncing)

    @property
    def user_id(self) -> str:
        """The bot's Matrix id once started."""
        return self._me

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Check the token (``whoami``), then (``receive``) start syncing."""
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=10))
        api = HeraldHTTPAPI(self._homeserver, self._token, client_session=session, default_retry_count=0)
        try:
            async with asyncio.timeout(START_TIMEOUT):
                whoami = await api.request(Method.GET, Path.v3.account.whoami)
                me = str(whoami["user_id"])
                versions = await api.request(Method.GET, "/_matrix/client/versions")
                with contextlib.suppress(MatrixRequestError):
                    profile = await api.request(Method.GET, Path.v3.profile[me].displayname)
                    self._my_name = str(profile.get("displayname") or "")
        except MUnknownToken:
            await session.close()
            raise DeliveryError(
                "the homeserver refused MATRIX_ACCESS_TOKEN: log in as the bot again and set the new token",
                permanent=True,
            ) from None
        except (*NETWORK_ERRORS, MatrixRequestError, KeyError) as error:
            await session.close()
            raise DeliveryError(
                f"cannot reach the Matrix homeserver {self._homeserver}: {error}", retryable=True
            ) from None
        self._api, self._client, self._me, self._sink = api, ClientAPI(UserID(me), api=api), me, sink
        supported = versions.get("versions", []) if isinstance(versions, dict) else []
        self._authenticated_media = any(_minor(v) >= AUTHENTICATED_MEDIA for v in supported)
        self._status.connected = True
        log.info("Matrix: signed in as %s on %s", me, self._homeserver)
        if receive:
            await self.start_receiving()

    async def start_receiving(self, allowed: Callable[[], bool] | None = None) -> None:
        if self._api is None:
            raise DeliveryError("the Matrix adapter is not started", permanent=True)
        if self._sync is not None and not self._sync.done:
            return
        self._allowed = allowed
        self._first_sync = asyncio.Event()
        self._syncing = AdapterStatus(connected=True)  # a new sync loop starts with no failure of its own
        self._sink_retry = SinkRetry(self._backoff, log=log, status=self._syncing)
        self._link = Reconnect(self._backoff, SYNCING, log=log, status=self._syncing)
        self._sync = BackgroundLoop("the Matrix sync loop", self._sync_loop).start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_TIMEOUT):  # the first answer (or failure), not forever
                await self._first_sync.wait()

    async def stop_receiving(self) -> None:
        sync, self._sync = self._sync, None
        if sync is not None:
            await sync.stop()

    async def stop(self) -> None:
        await self.stop_receiving()
        api, self._api, self._client = self._api, None, None
        if api is not None:
            await api.session.close()
        self._status.connected = False

    def status(self) -> AdapterStatus:
        """Connected: signed in, and the sync loop (while this process runs one) got its last sync
        answered. A process that does not sync (a cluster's worker, a leader that stepped down) is not
        judged by a loop it no longer runs."""
        syncing = self._syncing if self._sync is not None else None
        connected = self._status.connected and (syncing is None or syncing.connected)
        detail = syncing.detail if syncing is not None else self._status.detail
        return AdapterStatus(connected=connected, detail=detail, extra=dict(self._status.extra))

    # --- receiving ------------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        token = await self._stored_token()
        caught_up = False  # the first sync of a start returns at once: what came meanwhile, or nothing
        while True:
            if self._allowed is not None and not self._allowed():
                await asyncio.sleep(NOT_ALLOWED_PAUSE)
                continue
            batch = await self._fetch(token, wait=caught_up)
            self._first_sync.set()
            if batch is None:
                continue
            caught_up = True
            if token is None:  # the bot's first sync: take the token, answer no history
                if await self._handle(batch, messages=False):
                    token = batch.next_batch
            elif await self._handle(batch, messages=True, since=token):
                token = batch.next_batch

    async def _stored_token(self) -> str | None:
        while True:
            try:
                record = await self._records.get(TOKEN_KEY)
            except Unreachable as error:
                log.warning("Matrix: the sync token cannot be read yet (%s); retrying", error)
                await asyncio.sleep(self._token_backoff.next_delay())
                continue
            self._token_backoff.reset()
            token = record.value.get("next_batch") if record is not None else None
            return token if isinstance(token, str) else None

    async def _fetch(self, since: str | None, *, wait: bool) -> SyncBatch | None:
        """One sync (held open by the homeserver until something happens when ``wait``; a start does
        not wait, so it neither holds up the gateway's start nor answers late); on failure, log once
        per streak, wait and return None."""
        assert self._api is not None
        query = {"filter": sync_filter(self._me, first=since is None), "set_presence": "offline"}
        held = int(self._sync_wait * 1000) if since and wait else 0
        query.update({"since": since, "timeout": str(held)} if since else {"timeout": "0"})
        try:
            async with asyncio.timeout(self._sync_wait + SYNC_SLACK):
                answer = await self._api.request(Method.GET, Path.v3.sync, query_params=query)
            batch = read_sync(answer)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # network, 5xx, a bad answer: never end the loop
            await self._link.failed(str(error), retry_after=getattr(error, "retry_after", None))
            return None
        self._link.recovered()
        return batch

    async def _handle(self, batch: SyncBatch, *, messages: bool, since: str | None = None) -> bool:
        """Act on a batch (invites, encrypted rooms), hand its messages to the sink, then keep its token.
        False (after a pause) when something failed: nothing of it is confirmed, the next sync repeats it."""
        found: list[InboundMessage] = []
        refused = [r for r in batch.rooms if _encrypted(r)]

        async def act() -> None:
            found.clear()
            for invite in batch.invites:
                await self._answer_invite(invite)
            for room in refused:
                await self._refuse_encrypted(room.room_id)
            readable = [r for r in batch.rooms if r not in refused and r.room_id not in self._refused]
            for room in readable:
                self._note_members(room)
            if messages:
                unknown = {r.room_id for r in readable if r.room_id not in self._members and r.timeline}
                await asyncio.gather(*(self._room_members(room_id) for room_id in unknown))
                for room in readable:
                    found.extend(await self._messages(room, since))
            if found:
                assert self._sink is not None
                await self._sink(found)

        if not await self._sink_retry.attempt(act, "a Matrix sync batch"):
            return False
        acted = bool(found or batch.invites or refused or not messages)
        if acted or time.monotonic() - self._token_kept >= TOKEN_REFRESH:  # nothing acted on: nothing
            try:  # to replay from the older token, so it need not be written at every sync
                await self._records.put(TOKEN_KEY, {"next_batch": batch.next_batch})
                self._token_kept = time.monotonic()
            except Unreachable as error:  # the messages are stored: a restart syncs them again (dropped)
                log.warning("Matrix: the sync token could not be kept (%s); kept in memory", error)
        return True

    def _note_members(self, room: RoomEvents) -> None:
        known = self._members.get(room.room_id)
        if known is None:
            return  # fetched whole when first needed
        known.update(room.joined)
        for user in room.left:
            known.pop(user, None)
        if room.member_count is not None and room.member_count != len(known):
            self._members.pop(room.room_id, None)  # out of step: fetch again

    async def _room_members(self, room_id: str) -> dict[str, str] | None:
        """The room's joined members (id -> display name); None when the bot is no longer in it (its
        messages are then left: nobody can answer them there). Network trouble raises (retried)."""
        known = self._members.get(room_id)
        if known is None:
            assert self._api is not None
            try:
                async with asyncio.timeout(self._request_timeout):
                    answer = await self._api.request(Method.GET, Path.v3.rooms[room_id].joined_members)
            except (MForbidden, MNotFound) as error:
                log.info("Matrix: not reading %s, the bot is not in it (%s)", room_id, error)
                return None
            joined = answer.get("joined", {}) if isinstance(answer, dict) else {}
            known = {
                str(user): str((info or {}).get("display_name") or user)
                for user, info in joined.items()
                if isinstance(info, dict | type(None))
            }
            self._members[room_id] = known
        return known

    async def _messages(self, room: RoomEvents, since: str | None) -> list[InboundMessage]:
        events: list[Mapping[str, Any]] = list(room.timeline)
        if room.gap is not None and since is not None:
            events = [*await self._missed(room.room_id, room.gap, since), *events]
        events = since_invited(events, self._me)  # a room just joined comes with its history
        found: list[InboundMessage] = []
        for event in events:
            if not is_message(event, self._me):
                continue
            members = await self._room_members(room.room_id)
            if members is None:
                return []
            sender = str(event["sender"])
            content: Mapping[str, Any] = event["content"] if isinstance(event.get("content"), dict) else {}
            direct = len(members) <= 2
            addressed = direct or await self._addressed(room.room_id, content)
            found.append(
                to_inbound(
                    room.room_id,
                    event,
                    direct=direct,
                    sender_name=members.get(sender, sender),
                    addressed=addressed,
                )
            )
        return found

    async def _missed(self, room_id: str, gap: str, since: str) -> list[dict[str, Any]]:
        """The events a cut timeline left out (between the last sync and ``gap``), oldest first."""
        assert self._api is not None
        missed: list[dict[str, Any]] = []
        start: str | None = gap
        for _ in range(GAP_PAGES):
            if start is None:
                break
            query = {"from": start, "to": since, "dir": "b", "limit": "100"}
            async with asyncio.timeout(self._request_timeout):
                page = await self._api.request(
                    Method.GET, Path.v3.rooms[room_id].messages, query_params=query
                )
            chunk = [e for e in page.get("chunk", []) if isinstance(e, dict)]
            missed.extend(chunk)
            end = page.get("end")
            start = end if chunk and isinstance(end, str) and end != start else None
        return list(reversed(missed))

    async def _addressed(self, room_id: str, content: Mapping[str, Any]) -> bool:
        """A mention of the bot, a reply to one of its messages, or a command of its table."""
        if mentions(content, self._me, self._my_name) or command_of(
            str(content.get("body", "")), self._commands
        ):
            return True
        reply_to = relations(content).reply_to
        if reply_to is None:
            return False
        if reply_to in self._own:
            return True
        assert self._api is not None
        try:
            async with asyncio.timeout(self._request_timeout):
                event = await self._api.request(Method.GET, Path.v3.rooms[room_id].event[reply_to])
        except (*NETWORK_ERRORS, MatrixRequestError):
            return False
        return isinstance(event, dict) and event.get("sender") == self._me

    async def _answer_invite(self, invite: Invite) -> None:
        assert self._api is not None
        allowed = invite.inviter in self._invite_from or invite.room_id in self._invite_to
        rooms = Path.v3.rooms[invite.room_id]
        async with asyncio.timeout(self._request_timeout):
            if not allowed:
                log.info(
                    "Matrix: declined an invite to %s from %s (not allowed)", invite.room_id, invite.inviter
                )
                with contextlib.suppress(MNotFound, MForbidden):
                    await self._api.request(Method.POST, rooms.leave, {"reason": DECLINED})
                return
            try:
                await self._api.request(Method.POST, rooms.join, {})
            except (MNotFound, MForbidden) as error:  # withdrawn, or the room is gone: nothing to join
                log.warning(
                    "Matrix: could not join %s (invited by %s): %s", invite.room_id, invite.inviter, error
                )
                return
        log.info("Matrix: joined %s (invited by %s)", invite.room_id, invite.inviter)
        if invite.encrypted:
            await self._refuse_encrypted(invite.room_id)

    async def _refuse_encrypted(self, room_id: str) -> None:
        """Say in the room that the bot cannot read it, and leave (once per room)."""
        if room_id in self._refused:
            return
        assert self._api is not None
        log.warning("Matrix: %s is encrypted, which Herald does not support; saying so and leaving", room_id)
        with contextlib.suppress(*NETWORK_ERRORS, MatrixRequestError):
            async with asyncio.timeout(self._request_timeout):
                await self._send_event(
                    room_id, {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE, "m.mentions": {}}
                )
        with contextlib.suppress(MNotFound, MForbidden):  # already out of it
            async with asyncio.timeout(self._request_timeout):
                await self._api.request(Method.POST, Path.v3.rooms[room_id].leave, {"reason": "encrypted"})
        self._refused.add(room_id)
        self._members.pop(room_id, None)

    # --- sending --------------------------------------------------------------------------------

    async def _send_event(self, room_id: str, content: Mapping[str, Any], key: str | None = None) -> str:
        """Send an ``m.room.message`` event; ``key`` (a delivery key) is its transaction id, so the
        homeserver makes one event of every send with it and answers each with that event's id (the spec:
        per device and transaction id; a request it refused uses up nothing). No key: a fresh one."""
        assert self._api is not None
        txn = self._api.get_txn_id() if key is None else f"herald-{key}"
        path = Path.v3.rooms[room_id].send["m.room.message"][txn]
        answer = await self._api.request(Method.PUT, path, dict(content))
        event_id = str(answer["event_id"])
        self._own[event_id] = None
        while len(self._own) > KNOWN_OWN:
            self._own.popitem(last=False)
        return event_id

    async def _call(self, what: str, operation: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        if self._api is None:
            raise DeliveryError(f"{what}: the Matrix adapter is not started", retryable=True)
        try:
            async with asyncio.timeout(timeout or self._request_timeout):
                return await operation
        except DeliveryError:
            raise
        except Exception as error:
            raise delivery_error(what, error) from None

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        content = {**_formatted(text.text), **_relation(address, reply_to)}
        sending = self._send_event(address.chat_id, content, key)
        result: str = await self._call("send a Matrix message", sending)
        return result

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        new = _formatted(text.text)
        content = {
            "msgtype": "m.text",
            "body": f"* {new['body']}",
            "format": "org.matrix.custom.html",
            "formatted_body": f"* {new['formatted_body']}",
            "m.new_content": new,
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
            "m.mentions": {},
        }
        await self._call("edit a Matrix message", self._send_event(address.chat_id, content, key))

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        await self._call("redact a Matrix message", self._redact(address.chat_id, message_id))

    async def _redact(self, room_id: str, event_id: str) -> None:
        assert self._client is not None
        try:
            await self._client.redact(RoomID(room_id), EventID(event_id))
        except MNotFound:
            return

    async def typing(self, address: ChatAddress) -> None:
        if self._client is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await self._client.set_typing(RoomID(address.chat_id), timeout=TYPING_MS)

    async def notice(self, address: ChatAddress, text: str) -> None:
        content = {"msgtype": "m.notice", "body": text, "m.mentions": {}, **_relation(address, None)}
        with contextlib.suppress(DeliveryError):
            await self._call("send a Matrix notice", self._send_event(address.chat_id, content))

    async def set_commands(self, commands: list[CommandSpec]) -> None:
        """Matrix has no command menu: the table is recognised in rooms (``/name`` is addressed to the
        bot) and published in the bot's account data (``io.herald.commands``) for clients and tools."""
        self._commands = frozenset(command.name.casefold() for command in commands)
        listing = {"commands": [{"name": c.name, "description": c.description} for c in commands]}
        assert self._api is not None
        path = Path.v3.user[self._me].account_data[COMMANDS_TYPE]
        await self._call("publish the Matrix command list", self._api.request(Method.PUT, path, listing))

    # --- files ----------------------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        if not attachment.file_id.startswith("mxc://"):
            raise DeliveryError("the file is encrypted or missing (no mxc:// address)", permanent=True)
        if attachment.size is not None and attachment.size > max_bytes:
            raise DeliveryError(f"the file is larger than {max_bytes} bytes", permanent=True)
        if self._api is None:
            raise DeliveryError("the Matrix adapter is not started", retryable=True)
        url = self._api.get_download_url(attachment.file_id, authenticated=self._authenticated_media)
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with (
                asyncio.timeout(TRANSFER_TIMEOUT),
                self._api.session.get(url, headers=headers) as response,
            ):
                if response.status in (403, 404):
                    raise DeliveryError(f"the file is gone (HTTP {response.status})", permanent=True)
                if response.status == 429:
                    raise DeliveryError("downloading a Matrix file: rate limited", retryable=True)
                if response.status >= 300:
                    raise DeliveryError(f"downloading a Matrix file: HTTP {response.status}", retryable=True)
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data.extend(chunk)
                    if len(data) > max_bytes:
                        raise DeliveryError(f"the file is larger than {max_bytes} bytes", permanent=True)
                return bytes(data)
        except DeliveryError:
            raise
        except Exception as error:
            raise delivery_error("download a Matrix file", error) from None

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        if len(file.data) > MAX_UPLOAD_BYTES:
            raise DeliveryError(f"{file.name} is larger than Matrix's {MAX_UPLOAD_BYTES} bytes")
        mxc = await self._call("upload a Matrix file", self._upload(file), TRANSFER_TIMEOUT)
        content = {
            "msgtype": _msgtype(file.mime_type),
            "body": file.name,
            "filename": file.name,
            "url": str(mxc),
            "info": {"mimetype": file.mime_type, "size": len(file.data)},
            "m.mentions": {},
            **_relation(address, reply_to),
        }
        result: str = await self._call("send a Matrix file", self._send_event(address.chat_id, content))
        return result

    async def _upload(self, file: OutboundFile) -> str:
        assert self._client is not None
        return str(await self._client.upload_media(file.data, mime_type=file.mime_type, filename=file.name))


def _formatted(markdown: str) -> dict[str, Any]:
    """A text message's content: the Markdown as its plain body, its HTML as the formatted body; an
    empty ``m.mentions``: nothing the bot writes pings anyone."""
    return {
        "msgtype": "m.text",
        "body": markdown,
        "format": "org.matrix.custom.html",
        "formatted_body": to_html(markdown),
        "m.mentions": {},
    }


def _relation(address: ChatAddress, reply_to: str | None) -> dict[str, Any]:
    """``m.relates_to`` putting a message in its thread (and making it a reply when asked)."""
    if address.thread_id is not None:
        return {
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": address.thread_id,
                "is_falling_back": reply_to is None,
                "m.in_reply_to": {"event_id": reply_to or address.thread_id},
            }
        }
    if reply_to is not None:
        return {"m.relates_to": {"m.in_reply_to": {"event_id": reply_to}}}
    return {}


def _minor(version: object) -> int:
    """``11`` for the spec version ``"v1.11"`` (-1 for anything else)."""
    text = str(version)
    if not text.startswith("v1."):
        return -1
    return int(text[3:]) if text[3:].isdigit() else -1


def _encrypted(room: RoomEvents) -> bool:
    """Encryption is on in the room (its state says so, or an encrypted event arrived)."""
    return room.encrypted or any(event.get("type") == ENCRYPTED for event in room.timeline)


def _msgtype(mime_type: str) -> str:
    major = mime_type.split("/", 1)[0]
    return {"image": "m.image", "audio": "m.audio", "video": "m.video"}.get(major, "m.file")
