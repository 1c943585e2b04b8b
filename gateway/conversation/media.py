"""What a message with files becomes for the model: text, images and documents, or one clear refusal.

Runs in the chat's lane right before the turn, once the session (and so its model) is known: photos
go to a model that sees images as image blocks, PDFs to Claude as document blocks and to other models
as their text, text files as text, voice notes as their transcript; anything else is named. A file
sent as a file is an image when its bytes are one (a BMP, a TIFF, a PNG that came without a type): one
rule, :func:`agent.media.images.is_image_file`, whatever the platform said. The files
are downloaded here, not when the message arrives: the platform is told a message was received as soon
as it is stored, and a large file must not hold that up.

A file that cannot be used (damaged, over a limit, a voice note with no transcription set up, a
download that failed) ends the message with one sentence that names the file and the reason, and
nothing of the message reaches the model or the history: the person can fix it and send it again.
Nothing here imports a platform: files come through :meth:`adapters.base.Adapter.download`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from adapters.base import Adapter, Attachment, DeliveryError, InboundMessage
from agent.api import (
    TRANSCRIPTION_PURPOSE,
    DecodeBudget,
    Media,
    MediaLimits,
    MediaLoad,
    MediaRefused,
    ModelInfo,
    OverBudget,
    Payer,
    ProviderError,
    ServiceCall,
    SessionRecord,
    SessionStore,
    Transcriber,
    TranscriptionFailed,
    check_load,
)
from agent.settings import MediaSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

MB = 1_000_000
DOWNLOAD_SECONDS = 180.0
FILE_THREADS = 2  # threads that read files (Pillow, pypdf), apart from the event loop's own
_FILE_WORK = ThreadPoolExecutor(max_workers=FILE_THREADS, thread_name_prefix="herald-files")
PREPARE_SECONDS = 60.0  # reading one file (documents stop themselves at EXTRACT_SECONDS, between pages)
# The transcriber bounds each attempt (``stt.timeout``) and its retries; this bounds them all together.
TRANSCRIBE_SECONDS = 900.0
TRANSCRIPT_LABEL = "[voice message, transcribed]"
NO_STT = (
    "I can't listen to voice messages here: speech-to-text is not set up (the owner can turn it on "
    "with stt.provider in config.yaml). Please type your message."
)


@dataclass(frozen=True)
class TurnInput:
    """A message ready for the turn: its text (labels for the files, transcripts, the caption), its
    images and documents, lines to add under the answer, and transcripts to echo into the chat."""

    text: str
    media: tuple[Media, ...] = ()
    notices: tuple[str, ...] = ()
    transcripts: tuple[str, ...] = ()


class MessageRefused(Exception):
    """The message cannot go to the model; the text is what the person is told."""


@dataclass
class _Parts:
    lines: list[str] = field(default_factory=list)
    media: list[Media] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    transcripts: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)  # images a model without vision was not sent
    unopened: list[str] = field(default_factory=list)  # videos, GIFs, stories...: nothing reads them
    usable: bool = False  # something the model can act on (a file it reads, or words)

    def closing_notices(self, model: str) -> list[str]:
        """The lines for the person, worded for whether the model got anything at all."""
        lines = list(self.notices)
        if self.unseen:
            what = _listed(self.unseen)
            lines.append(
                f"{model} cannot see images, so it got the rest of your message without {what} (pick a "
                "model that can with /model, then /new)."
                if self.usable
                else f"{model} cannot see images, so I did not send it {what}: pick a model that can with "
                "/model, then /new, or tell me in words what it shows."
            )
        if self.unopened:
            what = _listed(self.unopened)
            lines.append(
                f"I can't watch or open {what}; I read the rest of your message."
                if self.usable
                else f"I can't watch or open {what}; please tell me in words."
            )
        return lines


@dataclass(frozen=True)
class MediaReader:
    """Turns a stored message's files into :class:`TurnInput` for one session's model."""

    settings: MediaSettings
    max_attachment_mb: float
    transcriber: Transcriber | None
    store: SessionStore
    payer: Payer  # a transcription is paid like a model request (``agent.paid``), in the turn's charge
    decode_budget: DecodeBudget = field(init=False)

    def __post_init__(self) -> None:  # one budget for every image this gateway reads
        object.__setattr__(self, "decode_budget", DecodeBudget(self.settings.image_decode_memory_mb * MB))

    async def read(
        self, adapter: Adapter, message: InboundMessage, session: SessionRecord, model: ModelInfo
    ) -> TurnInput:
        """The message as the session's model gets it; raises :class:`MessageRefused`."""
        if not message.attachments:
            return TurnInput(message.text)
        parts = _Parts(usable=bool(message.text.strip()))
        for attachment in message.attachments:
            try:
                await self._add(parts, adapter, attachment, session, model)
            except MediaRefused as error:
                raise MessageRefused(str(error)) from None
        notices = parts.closing_notices(session.model)
        if not parts.usable:  # only files the model cannot use: say so instead of a pointless turn
            raise MessageRefused(" ".join(notices) or "I could not read any of the files you sent.")
        if parts.media:
            await self._check_load(parts.media, session, model)
        text = "\n".join([*parts.lines, message.text] if message.text else parts.lines)
        return TurnInput(text, tuple(parts.media), tuple(notices), tuple(parts.transcripts))

    async def _add(
        self,
        parts: _Parts,
        adapter: Adapter,
        attachment: Attachment,
        session: SessionRecord,
        model: ModelInfo,
    ) -> None:
        kind = _kind(attachment)
        name = attachment.name or _described(attachment)
        if kind == "other":
            parts.lines.append(
                f"[{attachment.kind}{' ' + attachment.name if attachment.name else ''}: not shown]"
            )
            parts.unopened.append(name)
        elif kind == "audio":
            if self.transcriber is None:
                parts.notices.append(NO_STT)
                return
            data = await self._download(adapter, attachment, name)
            transcript = await self._transcribe(data, attachment, session)
            parts.lines.append(f"{TRANSCRIPT_LABEL} {transcript}")
            parts.transcripts.append(transcript)
            parts.usable = True
        elif kind == "image" and not model.vision:  # a photo: not even downloaded
            self._unseen(parts, attachment, name)
        else:
            data = await self._download(adapter, attachment, name)
            from agent.api import is_image_file  # Pillow: loaded with the first file

            if kind == "image" or is_image_file(data, name=attachment.name, media_type=attachment.mime_type):
                if model.vision:
                    await self._add_image(parts, data, attachment)
                else:
                    self._unseen(parts, attachment, name)
            else:
                await self._add_document(parts, data, attachment, session, model)

    @staticmethod
    def _unseen(parts: _Parts, attachment: Attachment, name: str) -> None:
        parts.lines.append(f"[{_image_label(attachment)}: not shown, this model cannot see images]")
        parts.unseen.append(name)

    async def _add_image(self, parts: _Parts, data: bytes, attachment: Attachment) -> None:
        from agent.api import prepare_image  # Pillow: loaded with the first image

        media = await _in_thread(
            attachment,
            functools.partial(
                prepare_image,
                data,
                name=attachment.name,
                max_edge=self.settings.image_max_edge,
                max_megapixels=self.settings.image_max_megapixels,
                budget=self.decode_budget,
            ),
        )
        parts.lines.append(f"[{_image_label(attachment)}]")
        parts.media.append(media)
        parts.usable = True

    async def _add_document(
        self, parts: _Parts, data: bytes, attachment: Attachment, session: SessionRecord, model: ModelInfo
    ) -> None:
        from agent.api import prepare_document  # pypdf: loaded with the first document

        document = await _in_thread(
            attachment,
            functools.partial(
                prepare_document,
                data,
                name=attachment.name,
                media_type=attachment.mime_type,
                native_pdf=model.pdf and session.provider == "anthropic",
                max_pages=self.settings.pdf_max_pages,
                max_chars=self.settings.document_max_chars,
            ),
        )
        parts.lines.append(document.text)
        if document.media is not None:
            parts.media.append(document.media)
        if document.problem is None:
            parts.usable = True
        else:
            parts.notices.append(document.problem)

    async def _check_load(self, files: list[Media], session: SessionRecord, model: ModelInfo) -> None:
        """Refuse files that would take the conversation over what one request may carry: the
        conversation's files are sent again with every later message."""
        limits = MediaLimits(
            max_items=self.settings.files_max_per_request,
            max_tokens=int(model.context_length * self.settings.files_max_context_share),
            model=session.model,
            context_length=model.context_length,
        )
        held = await self.store.messages.media_load(session.id)
        try:
            check_load(MediaLoad.of(files), held, limits, what=_named(files))
        except MediaRefused as error:
            raise MessageRefused(str(error)) from None

    async def _download(self, adapter: Adapter, attachment: Attachment, name: str) -> bytes:
        limit = int(self.max_attachment_mb * MB)  # a size the platform told is checked on arrival (router)
        try:
            async with asyncio.timeout(DOWNLOAD_SECONDS):
                return await adapter.download(attachment, limit)
        except TimeoutError:
            raise MessageRefused(f"Downloading {name} took too long; please send it again.") from None
        except DeliveryError as error:
            log.warning("%s: downloading %s failed: %s", adapter.platform, attachment.kind, error)
            if error.permanent:  # too large for the platform or the limit: sending it again will not help
                raise MessageRefused(f"I could not download {name}: {error}.") from None
            raise MessageRefused(f"I could not download {name} ({error}); please send it again.") from None

    async def _transcribe(self, data: bytes, attachment: Attachment, session: SessionRecord) -> str:
        """The words in ``data``, paid in the current charge; ``OverBudget`` when a limit refuses it."""
        transcriber = self.transcriber
        assert transcriber is not None
        file_name = attachment.name or f"{attachment.kind}{_audio_suffix(attachment.mime_type)}"
        call = ServiceCall(
            purpose=TRANSCRIPTION_PURPOSE,
            provider=transcriber.provider,
            model=transcriber.model,
            price=transcriber.estimate(len(data)),
            send=lambda: transcriber.transcribe(data, file_name=file_name, media_type=attachment.mime_type),
            billed=lambda heard: transcriber.billed(heard, len(data)),
        )
        try:
            transcript = await self.payer.pay(call, session_id=session.id, timeout=TRANSCRIBE_SECONDS)
        except TranscriptionFailed as error:
            raise MessageRefused(str(error)) from None
        except ProviderError as error:  # its own timeouts became TranscriptionFailed: this is the backstop
            if isinstance(error, OverBudget):
                raise
            raise MessageRefused(f"I could not transcribe {file_name}: {error}.") from None
        return transcript.text


async def _in_thread(attachment: Attachment, work: Callable[[], T]) -> T:
    """Blocking file work (Pillow, pypdf) in a thread, waited for at most :data:`PREPARE_SECONDS`: the
    chat's lane must not hang on one file. A thread cannot be stopped; one given up on finishes alone,
    in a pool of its own (:data:`FILE_THREADS`), so crafted files can slow other files down but never
    take the threads the event loop needs (DNS lookups, the database)."""
    try:
        async with asyncio.timeout(PREPARE_SECONDS):
            return await asyncio.get_running_loop().run_in_executor(_FILE_WORK, work)
    except TimeoutError:
        log.warning("reading a %s took over %gs; given up", attachment.kind, PREPARE_SECONDS)
        what = attachment.name or _described(attachment)
        raise MessageRefused(
            f"Reading {what} took too long (over {PREPARE_SECONDS:g} seconds); send a smaller file."
        ) from None


def _kind(attachment: Attachment) -> str:
    """image | audio | document | other (videos, animated stickers, stories...), by what the platform
    said it is. A file sent as a file (``document``) may still be an image: that is decided by its bytes
    once it is downloaded (:func:`agent.media.images.is_image_file`)."""
    mime = attachment.mime_type or ""
    if attachment.kind == "photo" or (attachment.kind == "sticker" and mime.startswith("image/")):
        return "image"
    if attachment.kind in ("voice", "audio"):
        return "audio"
    if attachment.kind == "document":
        return "document"
    return "other"


def _image_label(attachment: Attachment) -> str:
    """``photo`` (``sticker``) for what was sent as one, ``image`` for an image sent as a file; with its
    name."""
    label = attachment.kind if attachment.kind in ("photo", "sticker") else "image"
    return f"{label}: {attachment.name}" if attachment.name else label


def _described(attachment: Attachment) -> str:
    """How to name an attachment that came without a file name."""
    return _DESCRIPTIONS.get(attachment.kind, f"the {attachment.kind.replace('_', ' ')}")


_DESCRIPTIONS = {
    "photo": "the photo",
    "document": "the file",
    "voice": "the voice message",
    "audio": "the audio file",
    "video": "the video",
    "video_note": "the round video message",
    "animation": "the GIF",
}


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _named(files: list[Media]) -> str:
    """How a refusal names the files of one message."""
    if len(files) > 1:
        return f"these {len(files)} files"
    [file] = files
    return file.name or ("the photo" if file.kind == "image" else "the PDF")


def _audio_suffix(mime_type: str | None) -> str:
    return {"audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/x-wav": ".wav", "audio/wav": ".wav"}.get(
        mime_type or "", ".ogg"
    )
