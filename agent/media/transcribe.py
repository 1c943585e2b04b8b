"""Speech to text for voice notes and audio files, through OpenAI's transcription API.

Any server that speaks that API works (OpenAI's own, or a local Whisper server at ``stt.base_url``).
The transcript becomes the person's words in the conversation (marked as a transcript by the gateway),
so the model answers a voice note like a typed message.

Contract: :meth:`Transcriber.transcribe` returns a :class:`Transcript` or raises
:class:`TranscriptionFailed` with one sentence for the person (no API key or URL in it); it retries what a
retry can fix (429, 5xx, timeouts), honouring ``retry-after``. Safe to call from several tasks at once.

A transcription is billed by the minute of audio: it is a paid service (``agent.paid``), sent through
``ModelCalls.pay`` by the gateway. Its price is estimated from the file's size before it is sent
(:meth:`Transcriber.estimate`: at a voice note's bit rate, so louder codecs are over-estimated, which
only reserves more for a moment) and settled at the duration the service reports it billed.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from agent.files.text import valid_text
from agent.model.provider import ProviderError
from agent.providers.errors import provider_failures
from agent.providers.retry import RetryPolicy, call_with_retries

log = logging.getLogger(__name__)


# USD per minute of audio, from OpenAI's price list; a model not listed is priced as whisper-1.
OPENAI_PRICES = {"whisper-1": 0.006, "gpt-4o-transcribe": 0.006, "gpt-4o-mini-transcribe": 0.003}
ESTIMATE_BYTES_PER_SECOND = 2_000  # 16 kbit/s, a voice note's Opus: what a file's size is taken to hold


class TranscriptionFailed(Exception):
    """No transcript; the message is one sentence for the person who sent the audio."""


@dataclass(frozen=True)
class Transcript:
    """What was heard; ``seconds`` is the audio's length as the service billed it (None: not reported)."""

    text: str
    seconds: float | None = None


class Transcriber(ABC):
    """One transcription service. ``provider`` and ``model`` name it in the usage record."""

    provider: str
    model: str
    price_per_minute: float

    def estimate(self, size: int) -> float:
        """What transcribing ``size`` bytes of audio is expected to cost in USD (before it is sent)."""
        return self.price_for(size / ESTIMATE_BYTES_PER_SECOND)

    def price_for(self, seconds: float) -> float:
        return seconds / 60 * self.price_per_minute

    def billed(self, transcript: Transcript, size: int) -> float:
        """What a transcription cost: its reported duration's price, else the estimate from ``size``."""
        if transcript.seconds is None:
            return self.estimate(size)
        return self.price_for(transcript.seconds)

    @abstractmethod
    async def transcribe(self, data: bytes, *, file_name: str, media_type: str | None) -> Transcript:
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
        price_per_minute: float | None = None,
    ) -> None:
        import openai  # about a second to import: only when transcription is configured

        self._sdk = openai
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
        self.provider = "openai"
        self.model = model
        known = OPENAI_PRICES.get(model, OPENAI_PRICES["whisper-1"])
        self.price_per_minute = known if price_per_minute is None else price_per_minute
        self._language = language
        self._retry = retry

    async def transcribe(self, data: bytes, *, file_name: str, media_type: str | None) -> Transcript:
        options: dict[str, Any] = {"model": self.model, "file": (file_name, data, media_type or "audio/ogg")}
        if self._language:
            options["language"] = self._language

        async def attempt() -> Transcript:
            with provider_failures(self._sdk, "transcription", [self._client.api_key]):
                result = await self._client.audio.transcriptions.create(**options)
            text = valid_text(str(getattr(result, "text", result))).strip()
            return Transcript(text, _billed_seconds(getattr(result, "usage", None)))

        try:
            transcript = await call_with_retries(attempt, self._retry, name="transcription")
        except ProviderError as error:
            log.warning("transcription of %s failed: %s (%s)", file_name, error, error.kind)
            raise TranscriptionFailed(f"I could not transcribe {file_name}: {_reason(error)}.") from None
        if not transcript.text:
            raise TranscriptionFailed(f"I could not hear any words in {file_name}.")
        return transcript

    async def aclose(self) -> None:
        await self._client.close()


def _billed_seconds(usage: object) -> float | None:
    """The duration a transcription's ``usage`` reports (``{"type": "duration", "seconds": ...}``);
    None for a model billed by tokens or a server that reports nothing (then the size's estimate)."""
    seconds = getattr(usage, "seconds", None)
    if getattr(usage, "type", None) != "duration" or not isinstance(seconds, int | float) or seconds < 0:
        return None
    return float(seconds)


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
