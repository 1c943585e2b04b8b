"""What a message with files becomes for the model: text, images and documents, or one clear refusal.

Runs in the chat's lane right before the turn, once the session (and so its model) is known: photos
go to a model that sees images as image blocks, PDFs to Claude as document blocks and to other models
as their text, text files as text, voice notes as their transcript; anything else is named. The files
are downloaded here, not when the message arrives: the platform is told a message was received as soon
as it is stored, and a large file must not hold that up.

A file that cannot be used (damaged, over a limit, a voice note with no transcription set up, a
download that failed) ends the message with one sentence that names the file and the reason, and
nothing of the message reaches the model or the history: the person can fix it and send it again.
Nothing here imports a platform: files come through :meth:`adapters.base.Adapter.download`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from adapters.base import Adapter, Attachment, DeliveryError, InboundMessage
from agent.media.budget import MediaLimits, MediaLoad, check_load
from agent.media.errors import MediaRefused
from agent.media.transcribe import Transcriber, TranscriptionFailed
from agent.media.types import Media
from agent.models import ModelInfo
from agent.settings import MediaSettings
from agent.store import SessionRecord, SessionStore

log = logging.getLogger(__name__)

MB = 1_000_000
DOWNLOAD_SECONDS = 180.0
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
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
    usable: bool = False  # something the model can act on (a file it reads, or words)


@dataclass(frozen=True)
class MediaReader:
    """Turns a stored message's files into :class:`TurnInput` for one session's model."""

    settings: MediaSettings
    max_attachment_mb: float
    transcriber: Transcriber | None
    store: SessionStore

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
        if not parts.usable:  # only files the model cannot use: say so instead of a pointless turn
            raise MessageRefused(" ".join(parts.notices) or "I could not read any of the files you sent.")
        if parts.media:
            await self._check_load(parts.media, session, model)
        text = "\n".join([*parts.lines, message.text] if message.text else parts.lines)
        return TurnInput(text, tuple(parts.media), tuple(parts.notices), tuple(parts.transcripts))

    async def _add(
        self,
        parts: _Parts,
        adapter: Adapter,
        attachment: Attachment,
        session: SessionRecord,
        model: ModelInfo,
    ) -> None:
        kind = _kind(attachment)
        name = attachment.name or kind
        if kind == "image":
            if not model.vision:
                parts.lines.append(f"[{name}: not shown, this model cannot see images]")
                parts.notices.append(
                    f"{session.model} cannot see images, so it got only your text (pick a model that can "
                    "with /model, then /new)."
                )
                return
            from agent.media.images import prepare_image  # Pillow: loaded with the first image

            data = await self._download(adapter, attachment, name)
            media = await asyncio.to_thread(
                prepare_image,
                data,
                name=attachment.name,
                max_edge=self.settings.image_max_edge,
                max_megapixels=self.settings.image_max_megapixels,
            )
            parts.lines.append(f"[{attachment.kind}{': ' + attachment.name if attachment.name else ''}]")
            parts.media.append(media)
            parts.usable = True
        elif kind == "audio":
            if self.transcriber is None:
                parts.notices.append(NO_STT)
                return
            data = await self._download(adapter, attachment, name)
            transcript = await self._transcribe(data, attachment)
            parts.lines.append(f"{TRANSCRIPT_LABEL} {transcript}")
            parts.transcripts.append(transcript)
            parts.usable = True
        elif kind == "document":
            from agent.media.documents import prepare_document  # pypdf: loaded with the first document

            data = await self._download(adapter, attachment, name)
            document = await asyncio.to_thread(
                prepare_document,
                data,
                name=attachment.name,
                media_type=attachment.mime_type,
                native_pdf=model.pdf and session.provider == "anthropic",
                max_pages=self.settings.pdf_max_pages,
                max_chars=self.settings.document_max_chars,
            )
            parts.lines.append(document.text)
            if document.media is not None:
                parts.media.append(document.media)
            if document.readable:
                parts.usable = True
            else:
                parts.notices.append(f"I can't read {name}; send it as a PDF or a text file.")
        else:
            parts.lines.append(
                f"[{attachment.kind}{' ' + attachment.name if attachment.name else ''}: not shown]"
            )
            parts.notices.append(f"I can't watch or open {name}; I only read your text.")

    async def _check_load(self, files: list[Media], session: SessionRecord, model: ModelInfo) -> None:
        """Refuse files that would take the conversation over what one request may carry: the
        conversation's files are sent again with every later message."""
        limits = MediaLimits(
            max_items=self.settings.files_max_per_request,
            max_tokens=int(model.context_length * self.settings.files_max_context_share),
            model=session.model,
            context_length=model.context_length,
        )
        held = await self.store.media_load(session.id)
        try:
            check_load(MediaLoad.of(files), held, limits, what=_named(files))
        except MediaRefused as error:
            raise MessageRefused(str(error)) from None

    async def _download(self, adapter: Adapter, attachment: Attachment, name: str) -> bytes:
        limit = int(self.max_attachment_mb * MB)
        try:
            async with asyncio.timeout(DOWNLOAD_SECONDS):
                return await adapter.download(attachment, limit)
        except TimeoutError:
            raise MessageRefused(f"Downloading {name} took too long; please send it again.") from None
        except DeliveryError as error:
            log.warning("%s: downloading %s failed: %s", adapter.platform, attachment.kind, error)
            raise MessageRefused(f"I could not download {name} ({error}); please send it again.") from None

    async def _transcribe(self, data: bytes, attachment: Attachment) -> str:
        assert self.transcriber is not None
        file_name = attachment.name or f"{attachment.kind}{_audio_suffix(attachment.mime_type)}"
        try:
            return await self.transcriber.transcribe(
                data, file_name=file_name, media_type=attachment.mime_type
            )
        except TranscriptionFailed as error:
            raise MessageRefused(str(error)) from None


def _kind(attachment: Attachment) -> str:
    """image | audio | document | other (video, animated stickers)."""
    mime = attachment.mime_type or ""
    if attachment.kind == "photo" or (attachment.kind in ("document", "sticker") and mime in IMAGE_TYPES):
        return "image"
    if attachment.kind in ("voice", "audio"):
        return "audio"
    if attachment.kind == "document":
        return "document"
    return "other"


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
