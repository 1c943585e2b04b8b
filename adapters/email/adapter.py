"""``EmailAdapter``: the bot's mailbox, read through IMAP (``aioimaplib``) and answered through SMTP
(``aiosmtplib``).

**A thread is a session.** A mail's chat is its sender (``user_id`` and ``chat_id`` are the address,
a direct chat), its ``thread_id`` the first Message-ID of its thread (``References``, else the thread
of the mail it answers, else its own): a reply the person writes to an answer stays in that session,
a new mail starts another. What a reply needs of its thread (its subject, its chain of Message-IDs)
is kept in the record store, so an answer after a restart or from another process threads the same.

**Store before acknowledging: ``\\Seen`` is the acknowledgement.** The mailbox's unread mail is read
(with ``BODY.PEEK``, which leaves it unread) and handed to the sink; only once the sink returned is it
flagged ``\\Seen``. A crash in between reads it again, and the gateway's inbox drops what it has (by
Message-ID): a restart answers each mail once. Then the adapter waits with IMAP IDLE (re-issued before
the 29 minutes a server may hold it) or, when the server has no IDLE, polls.

**Who is answered.** Only mail from an allowed address (``email.allowed_senders``, and the email ids
of ``gateway.admins``) is handed to the sink. Anyone else's is marked read and left: no pairing code,
no reply (a From is easily forged: an answer to a stranger could go to a person who never wrote).
Mail that a machine sent (``Auto-Submitted``, ``Precedence: bulk/list/junk``, ``List-Id``, a bounce)
is never answered either, nor the bot's own. An answer goes out as text/plain (the Markdown) with an
HTML alternative; there are no edits (``can_edit`` False: an answer is sent once, whole).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Literal

import aiosmtplib
from aioimaplib import IMAP4, IMAP4_SSL

from adapters.base import (
    Adapter,
    AdapterStatus,
    Attachment,
    Capabilities,
    ChatAddress,
    ChatType,
    DeliveryError,
    InboundMessage,
    InboundSink,
    OutboundFile,
    OutboundText,
    SinkRetry,
)
from adapters.names import clean_name
from adapters.reconnect import Reconnect
from adapters.records import MemoryRecordStore, RecordStore
from adapters.text.markdown import render_markdown
from resilience.backoff import Backoff
from resilience.loops import BackgroundLoop
from resilience.unreachable import Unreachable

from .inbound import IMAGE_TYPES, Mail, part_bytes, read_mail
from .outbound import Envelope, Thread, compose, compose_file
from .settings import PLATFORM, RECORDS

log = logging.getLogger(__name__)

MAX_MESSAGE = 100_000  # characters per mail: an answer is one mail (far below what servers take)
MAX_FILE_BYTES = (
    20 * 1024 * 1024
)  # an attachment: within what Gmail (25 MB) and most servers take after base64
TIMEOUT = 30.0  # one IMAP command or one SMTP exchange
TRANSFER_TIMEOUT = 120.0  # a mail with files, fetched or sent
IDLE_RENEW = 25 * 60.0  # seconds: IDLE is re-issued before the 29 minutes a server may hold it (RFC 2177)
BATCH = 50  # unread mails fetched and handed to the sink at once
START_TIMEOUT = 30.0
READING = "Email: reading the mailbox"  # the IMAP link, as the log and the status name it
THREAD_DAYS = 180  # a thread's record lives this long after its last mail
_UID = re.compile(rb"UID (\d+)")
_UIDVALIDITY = re.compile(rb"UIDVALIDITY (\d+)")


@dataclass(frozen=True)
class Server:
    """Where a protocol is spoken: host, port and how the connection is protected."""

    host: str
    port: int
    security: Literal["tls", "starttls", "none"]


class _Refused(Exception):
    """The server refused the login or the folder: a setting to fix, not a network failure."""


class EmailAdapter(Adapter):
    """One mailbox: ``address`` (the From of replies, shown as ``name``), logged in as ``username``
    with ``password`` on ``imap`` and ``smtp``; ``allowed``: the addresses whose mail is answered."""

    platform = PLATFORM
    receive_on_demand = True  # in a cluster one process reads the mailbox, every process sends
    prompt_hint = (
        "You are answering email. Your reply is sent as an email: plain text with light Markdown "
        "(also shown as HTML), no greeting line needed beyond what a short reply has, no signature; "
        "quoted earlier mail is not shown to you."
    )
    capabilities = Capabilities(
        max_message_length=MAX_MESSAGE,
        length_unit="chars",
        render=render_markdown,
        can_edit=False,
        has_threads=True,
        max_file_bytes=MAX_FILE_BYTES,
    )

    def __init__(
        self,
        *,
        address: str,
        password: str,
        imap: Server,
        smtp: Server,
        allowed: Collection[str],
        name: str = "Herald",
        username: str | None = None,
        mailbox: str = "INBOX",
        idle: bool = True,
        poll_interval: float = 60.0,
        records: RecordStore | None = None,
        idle_renew: float = IDLE_RENEW,
        timeout: float = TIMEOUT,
        retry_base: float = 1.0,
        retry_cap: float = 300.0,
    ) -> None:
        if not password:
            raise ValueError("the email password is empty")
        self._address = address.lower()
        self._name = name
        self._username = username or address
        self._password = password
        self._imap = imap
        self._smtp = smtp
        self._allowed = frozenset(a.lower() for a in allowed)
        self._mailbox = mailbox
        self._idle = idle
        self._poll_interval = poll_interval
        self._records = records if records is not None else MemoryRecordStore(RECORDS)
        self._idle_renew = idle_renew
        self._timeout = timeout
        self._backoff = Backoff(retry_base, max(retry_base, retry_cap))
        self._sink_retry = SinkRetry(self._backoff, log=log)
        self._sink: InboundSink | None = None
        self._may_read: Callable[[], bool] | None = None
        self._reader: BackgroundLoop | None = None
        self._first_read = asyncio.Event()
        self._status = AdapterStatus()
        self._reading = AdapterStatus()
        self._link = Reconnect(self._backoff, READING, log=log, status=self._reading)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Log in to IMAP (and open the folder) and to SMTP, then (``receive``) read the mailbox."""
        try:
            async with asyncio.timeout(START_TIMEOUT):
                client, _ = await self._connect()
                await _close(client)
                async with self._smtp_client():
                    pass
        except _Refused as error:
            raise DeliveryError(str(error), permanent=True) from None
        except DeliveryError:
            raise
        except (OSError, TimeoutError, aiosmtplib.SMTPException) as error:
            raise DeliveryError(f"cannot reach the mail servers: {error}", retryable=True) from None
        self._sink = sink
        self._status.connected = True
        log.info("Email: logged in as %s on %s and %s", self._username, self._imap.host, self._smtp.host)
        if receive:
            await self.start_receiving()

    async def start_receiving(self, allowed: Callable[[], bool] | None = None) -> None:
        if self._sink is None:
            raise DeliveryError("the email adapter is not started", permanent=True)
        if self._reader is not None and not self._reader.done:
            return
        self._may_read = allowed
        self._first_read = asyncio.Event()
        self._reading = AdapterStatus(connected=True)
        self._link = Reconnect(self._backoff, READING, log=log, status=self._reading)
        self._reader = BackgroundLoop("the email (IMAP) reader", self._read_forever).start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_TIMEOUT):  # connected to the folder (or failed), not forever
                await self._first_read.wait()

    async def stop_receiving(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.stop()

    async def stop(self) -> None:
        await self.stop_receiving()
        self._status.connected = False

    def status(self) -> AdapterStatus:
        reading = self._reading if self._reader is not None else None
        connected = self._status.connected and (reading is None or reading.connected)
        return AdapterStatus(connected=connected, detail=reading.detail if reading else self._status.detail)

    # --- reading --------------------------------------------------------------------------------

    async def _connect(self) -> tuple[IMAP4, int]:
        """A logged-in IMAP connection with the folder selected, and the folder's UIDVALIDITY."""
        if self._imap.security == "tls":
            client: IMAP4 = IMAP4_SSL(self._imap.host, self._imap.port, timeout=self._timeout)
        else:
            client = IMAP4(self._imap.host, self._imap.port, timeout=self._timeout)
        try:
            await client.wait_hello_from_server()
            login = await client.login(self._username, self._password)
            if login.result != "OK":
                raise _Refused(
                    f"the IMAP server {self._imap.host} refused the login of {self._username}: check "
                    "EMAIL_PASSWORD (an app password for Gmail, Fastmail, iCloud) and email.username"
                )
            selected = await client.select(_quoted(self._mailbox))
            if selected.result != "OK":
                raise _Refused(f"the IMAP server has no folder {self._mailbox!r}: check email.mailbox")
        except BaseException:
            await _close(client)
            raise
        found = (
            _UIDVALIDITY.search(bytes(line)) for line in selected.lines if isinstance(line, bytes | bytearray)
        )
        validity = next((int(match.group(1)) for match in found if match), 0)
        return client, validity

    async def _read_forever(self) -> None:
        """Connect, read what is unread, wait for more; on any failure reconnect after a backoff."""
        while True:
            try:
                client, validity = await self._connect()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await self._failed(f"cannot connect: {error!r}")
                continue
            try:
                await self._read_connected(client, validity)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                await self._failed(f"connection lost: {error!r}")
            finally:
                await _close(client)

    async def _failed(self, problem: str) -> None:
        self._first_read.set()
        await self._link.failed(problem)

    async def _read_connected(self, client: IMAP4, validity: int) -> None:
        idle = self._idle and client.has_capability("IDLE")
        self._first_read.set()  # connected with the folder open: the start waits no longer (the sink
        # may hold mail that waited unread until the gateway has started, which is after this start)
        while True:
            if self._may_read is not None and not self._may_read():
                await asyncio.sleep(min(self._poll_interval, 1.0))
                continue
            read = await self._read_unread(client, validity)
            self._link.recovered()
            if read is None:
                await self._sink_retry.pause()
            elif read:
                continue  # a mail that came meanwhile may have been announced to a FETCH or a STORE,
                # which aioimaplib does not pass on: only a search that finds nothing leads to waiting
            elif idle:
                await self._wait_idle(client)
            else:
                await asyncio.sleep(self._poll_interval)
                _checked(await client.noop(), "NOOP")

    async def _wait_idle(self, client: IMAP4) -> None:
        """IDLE until the server tells of a change or ``idle_renew`` passed (then the caller reads the
        unread mail and idles again: IDLE is re-issued well before a server ends it)."""
        idling = await client.idle_start(timeout=self._idle_renew)
        try:
            await client.wait_server_push(timeout=self._idle_renew + self._timeout)
        finally:
            client.idle_done()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._timeout):
                    await asyncio.shield(idling)
        if not idling.done():
            raise TimeoutError("the IMAP server did not end IDLE")
        _checked(idling.result(), "IDLE")

    async def _read_unread(self, client: IMAP4, validity: int) -> int | None:
        """Hand every unread mail to the sink, then flag it ``\\Seen``; how many there were, or None when
        the sink failed (none of that batch is flagged: it is read again)."""
        sink = self._sink
        assert sink is not None
        found = await client.uid_search("UNSEEN", charset=None)
        _checked(found, "SEARCH")
        uids = sorted({int(uid) for line in found.lines[:-1] for uid in bytes(line).split() if uid.isdigit()})
        for start in range(0, len(uids), BATCH):
            chunk = uids[start : start + BATCH]
            fetched = await _fetch(client, chunk)
            messages = [
                message for uid in chunk if (message := await self._inbound(uid, validity, fetched.get(uid)))
            ]
            hand, what = functools.partial(sink, messages), f"{len(messages)} email(s)"
            if messages and not await self._sink_retry.attempt(hand, what, pause=False):
                return None  # none of the chunk is flagged: read again after the pause
            seen = ",".join(str(uid) for uid in chunk)
            _checked(await client.uid("store", seen, "+FLAGS.SILENT", r"(\Seen)"), "STORE")
        return len(uids)

    async def _inbound(self, uid: int, validity: int, raw: bytes | None) -> InboundMessage | None:
        """The mail as a message for the sink, or None when it is not to be answered (logged)."""
        if raw is None:
            return None  # expunged meanwhile
        mail = read_mail(raw, fallback_id=f"<uid-{validity}-{uid}@{PLATFORM}>")
        why = self._unanswered(mail)
        if why is not None:
            log.info("Email: not answering %s from %s: %s", mail.message_id, mail.sender or "nobody", why)
            return None
        root = await self._thread_of(mail)
        await self._remember(mail, root)
        return InboundMessage(
            platform=PLATFORM,
            chat_id=mail.sender,
            chat_type=ChatType.DIRECT,
            user_id=mail.sender,
            user_name=clean_name(mail.sender_name or mail.sender.split("@")[0]),
            message_id=mail.message_id,
            text=mail.text,
            timestamp=mail.timestamp or time.time(),
            thread_id=root,
            reply_to_id=mail.in_reply_to,
            addressed=True,
            chat_title=mail.subject or None,
            attachments=tuple(
                Attachment(
                    kind="photo" if part.mime_type in IMAGE_TYPES else "document",
                    file_id=f"{validity}:{uid}:{part.index}",
                    name=part.name,
                    mime_type=part.mime_type,
                    size=part.size,
                )
                for part in mail.parts
            ),
        )

    def _unanswered(self, mail: Mail) -> str | None:
        if not mail.sender:
            return "it has no sender"
        if mail.sender == self._address:
            return "the bot sent it"
        if mail.automatic is not None:
            return f"a machine sent it ({mail.automatic})"
        if mail.sender not in self._allowed:
            return "the sender is not in email.allowed_senders"
        return None

    async def _thread_of(self, mail: Mail) -> str:
        """The first Message-ID of the mail's thread (its own when it starts one)."""
        if not mail.references:
            return mail.message_id
        first = mail.references[0]
        known = await self._records.get(_message_key(first))
        thread = known.value.get("thread") if known is not None else None
        return thread if isinstance(thread, str) else first

    async def _remember(self, mail: Mail, root: str) -> None:
        """Keep what a reply in the mail's thread needs: its subject and its Message-IDs."""
        kept = await self._thread(root)
        subject = mail.subject or (kept.subject if kept else "")
        references = kept.references if kept else mail.references
        await self._keep(root, Thread(subject, references).after(mail.message_id))

    async def _thread(self, root: str) -> Thread | None:
        record = await self._records.get(_thread_key(root))
        if record is None:
            return None
        references = record.value.get("references")
        return Thread(
            str(record.value.get("subject", "")),
            tuple(str(r) for r in references) if isinstance(references, list) else (root,),
        )

    async def _keep(self, root: str, thread: Thread, sent: str | None = None) -> None:
        """Keep the thread; for a mail the bot ``sent``, also which thread it is in: a mail program that
        answers it with only ``In-Reply-To`` (no ``References``) still lands in that thread."""
        expires = time.time() + THREAD_DAYS * 86400
        value = {"subject": thread.subject, "references": list(thread.references)}
        await self._records.put(_thread_key(root), value, expires_at=expires)
        if sent is not None:
            await self._records.put(_message_key(sent), {"thread": root}, expires_at=expires)

    # --- sending --------------------------------------------------------------------------------

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """The reply as a mail in its thread; ``key`` makes its Message-ID (``outbound.message_id``: a
        resent reply is the same mail, which some mail programs show once)."""
        envelope, thread = await self._where(address)
        return await self._send(address, thread, compose(envelope, thread, reply_to, text.text, key))

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        if len(file.data) > MAX_FILE_BYTES:
            raise DeliveryError(f"{file.name} is larger than the {MAX_FILE_BYTES} bytes a mail carries here")
        envelope, thread = await self._where(address)
        message = compose_file(envelope, thread, reply_to, file.name, file.data, file.mime_type)
        return await self._send(address, thread, message)

    async def _where(self, address: ChatAddress) -> tuple[Envelope, Thread]:
        envelope = Envelope(self._address, self._name, address.chat_id)
        if address.thread_id is None:
            return envelope, Thread("", ())
        try:
            kept = await self._thread(address.thread_id)
        except Unreachable as error:
            raise DeliveryError(f"the thread cannot be read now: {error}", retryable=True) from None
        return envelope, kept or Thread("", (address.thread_id,))

    async def _send(self, address: ChatAddress, thread: Thread, message: EmailMessage) -> str:
        message_id = str(message["Message-ID"])
        try:
            async with self._smtp_client(TRANSFER_TIMEOUT) as client:
                await client.send_message(message)
        except _Refused as error:
            raise DeliveryError(str(error)) from None
        except aiosmtplib.SMTPRecipientsRefused as error:
            temporary = all(400 <= refused.code < 500 for refused in error.recipients)
            raise DeliveryError(
                f"the SMTP server refused {address.chat_id}: {error}", retryable=temporary
            ) from None
        except aiosmtplib.SMTPResponseException as error:
            raise DeliveryError(
                f"the SMTP server refused the mail: {error}", retryable=error.code < 500
            ) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as error:
            raise DeliveryError(f"sending mail failed: {error!r}", retryable=True) from None
        if address.thread_id is not None:
            with contextlib.suppress(Unreachable):  # sent: at worst a later reply threads less well
                await self._keep(address.thread_id, thread.after(message_id), sent=message_id)
        return message_id

    @contextlib.asynccontextmanager
    async def _smtp_client(self, timeout: float | None = None) -> AsyncIterator[aiosmtplib.SMTP]:  # noqa: ASYNC109
        """A connected SMTP client, logged in (unless the server is local and asks for no login)."""
        client = aiosmtplib.SMTP(
            hostname=self._smtp.host,
            port=self._smtp.port,
            use_tls=self._smtp.security == "tls",
            start_tls=self._smtp.security == "starttls",
            timeout=timeout or self._timeout,
        )
        await client.connect()
        try:
            if self._smtp.security != "none" or "auth" in client.esmtp_extensions:
                try:
                    await client.login(self._username, self._password)
                except aiosmtplib.SMTPAuthenticationError:
                    raise _Refused(
                        f"the SMTP server {self._smtp.host} refused the login of {self._username}: "
                        "check EMAIL_PASSWORD and email.username"
                    ) from None
            yield client
        finally:
            with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
                await client.quit()

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        raise DeliveryError("a sent mail cannot be edited", permanent=True)

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        """A sent mail cannot be taken back: there is nothing to do."""

    async def typing(self, address: ChatAddress) -> None:
        """Mail shows no typing."""

    # --- files ----------------------------------------------------------------------------------

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        try:
            validity, uid, index = (int(piece) for piece in attachment.file_id.split(":"))
        except ValueError:
            raise DeliveryError(f"not a file of a mail: {attachment.file_id!r}", permanent=True) from None
        if attachment.size is not None and attachment.size > max_bytes:
            raise DeliveryError(f"the file is larger than {max_bytes} bytes", permanent=True)
        try:
            async with asyncio.timeout(TRANSFER_TIMEOUT):
                client, current = await self._connect()
                try:
                    raw = (await _fetch(client, [uid])).get(uid) if current == validity else None
                finally:
                    await _close(client)
        except _Refused as error:
            raise DeliveryError(str(error), permanent=True) from None
        except Exception as error:
            raise DeliveryError(f"fetching the mail's file failed: {error!r}", retryable=True) from None
        data = part_bytes(raw, index) if raw is not None else None
        if data is None:
            raise DeliveryError("the mail or its file is gone from the mailbox", permanent=True)
        if len(data) > max_bytes:
            raise DeliveryError(f"the file is larger than {max_bytes} bytes", permanent=True)
        return data


def _thread_key(root: str) -> str:
    return f"thread:{root}"


def _message_key(message_id: str) -> str:
    return f"message:{message_id}"


def _quoted(mailbox: str) -> str:
    escaped = mailbox.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _checked(response: object, command: str) -> None:
    result = getattr(response, "result", None)
    if result != "OK":
        lines = getattr(response, "lines", [])
        raise ConnectionError(f"IMAP {command} failed: {result} {lines[-1:]!r}")


async def _fetch(client: IMAP4, uids: list[int]) -> dict[int, bytes]:
    """The whole of each mail (``BODY.PEEK[]``: fetching does not flag it read), by UID."""
    answer = await client.uid("fetch", ",".join(str(uid) for uid in uids), "(UID BODY.PEEK[])")
    _checked(answer, "FETCH")
    found: dict[int, bytes] = {}
    uid: int | None = None
    for line in answer.lines:
        if isinstance(line, bytearray):
            if uid is not None:
                found[uid] = bytes(line)
            uid = None
        elif isinstance(line, bytes):
            match = _UID.search(line)
            uid = int(match.group(1)) if match and b"FETCH" in line else uid
    return found


async def _close(client: IMAP4) -> None:
    """Log out (briefly: a dead connection is just dropped)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5.0):
            await client.logout()
    transport = getattr(client.protocol, "transport", None)
    if transport is not None:
        transport.close()
