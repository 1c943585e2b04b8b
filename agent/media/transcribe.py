"""Speech to text for voice notes and audio files, through OpenAI's transcription API.

Any server that speaks that API works (OpenAI's own, or a local Whisper server at ``stt.base_url``).
The transcript becomes the person's words in the conversation (marked as a transcript by the gateway),
so the model answers a voice note like a typed message.

Contract: :meth:`Transcriber.transcribe` returns the text or raises :class:`TranscriptionFailed` with one
sentence for the person (no API key or URL in it); it retries what a retry can fix (429, 5xx,
timeouts), honouring ``retry-after``. Safe to call from several tasks at once.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from agent.files.text import valid_text
from agent.providers.base import ProviderError
from agent.providers.errors import provider_failures
from agent.providers.retry import RetryPolicy, call_with_retries

log = logging.getLogger(__name__)


class TranscriptionFailed(Exception):
    """No transcript; the message is one sentence for the person who sent the audio."""


class Transcriber(ABC):
    @abstractmethod
    async def transcribe(self, data: bytes, *, file_name: str, media_type: str | None) -> str:
        """The words spoken in ``data`` (an audio file: ogg, mp3, m4a, wav, webm...)."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release network resources."""


class OpenAITranscriber(Transcriber):
    """``audio.transcriptions.create`` of the ``openai`` SDK (imported when the first one is built)."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None,
        timeout: float,
        language: str | None,
        retry: RetryPolicy,
    ) -> None:
        import openai  # about a second to import: only when transcription is configured

        self._sdk = openai
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
        self._model = model
        self._language = language
        self._retry = retry

    async def transcribe(self, data: bytes, *, file_name: str, media_type: str | None) -> str:
        options: dict[str, Any] = {"model": self._model, "file": (file_name, data, media_type or "audio/ogg")}
        if self._language:
            options["language"] = self._language

        async def attempt() -> str:
            with provider_failures(self._sdk, "transcription", [self._client.api_key]):
                result = await self._client.audio.transcriptions.create(**options)
            return valid_text(str(getattr(result, "text", result))).strip()

        try:
            text = await call_with_retries(attempt, self._retry, name="transcription")
        except ProviderError as error:
            log.warning("transcription of %s failed: %s (%s)", file_name, error, error.kind)
            raise TranscriptionFailed(f"I could not transcribe {file_name}: {_reason(error)}.") from None
        if not text:
            raise TranscriptionFailed(f"I could not hear any words in {file_name}.")
        return text

    async def aclose(self) -> None:
        await self._client.close()


def _reason(error: ProviderError) -> str:
    if error.kind == "timeout":
        return "the transcription service did not answer in time"
    if error.kind in ("unreachable", "connection"):
        return "the transcription service could not be reached"
    if error.status == 429:
        return "the transcription service is rate-limiting requests; try again in a minute"
    if error.status is not None and error.status >= 500:
        return f"the transcription service had an internal error (HTTP {error.status})"
    return f"the transcription service refused it ({error})"
