"""Text to speech for spoken replies: OpenAI's speech API or Microsoft Edge's read-aloud voices.

Both hand back an audio file (MP3: the speech API's default format, which every compatible server
makes, and the only one Edge sends); the gateway turns it into a voice note. Speech is billed per
character, so each synthesizer knows its price: a synthesis is a paid request like a model's, and goes
through the same road (:meth:`agent.model_calls.ModelCalls.speak`: the spend gate before it, the usage
record after it, retries in between).

Contract: :meth:`Synthesizer.synthesize` makes one attempt and returns the audio, or raises
:class:`~agent.model.provider.ProviderError` saying whether a retry may help (429, 5xx, a dropped
connection) and with no API key in its message. Safe to call from several tasks at once.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from typing import Final

from agent.model.provider import ProviderError
from agent.providers.errors import provider_failures

log = logging.getLogger(__name__)

OPENAI_VOICE = "alloy"
EDGE_VOICE = "en-US-EmmaMultilingualNeural"
# USD per million characters, from OpenAI's price list; a model not listed is priced as tts-1.
OPENAI_PRICES = {"tts-1": 15.0, "tts-1-hd": 30.0, "gpt-4o-mini-tts": 15.0}
AUDIO_FORMAT: Final = "mp3"


class Synthesizer(ABC):
    """One speech service. ``provider`` and ``model`` name it in the usage record."""

    provider: str
    model: str
    price_per_million_chars: float

    def cost(self, text: str) -> float:
        """What speaking ``text`` costs in USD (billed per character)."""
        return len(text) * self.price_per_million_chars / 1_000_000

    @abstractmethod
    async def synthesize(self, text: str) -> bytes:
        """``text`` spoken, as an audio file (one attempt; see the module docstring)."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release network resources."""


class OpenAISynthesizer(Synthesizer):
    """``audio.speech.create`` of the ``openai`` SDK (imported when the first one is built)."""

    provider = "openai"

    def __init__(
        self,
        *,
        model: str,
        voice: str | None,
        api_key: str,
        base_url: str | None,
        timeout: float,
        price_per_million_chars: float | None,
    ) -> None:
        import openai  # about a second to import: only when speech is configured

        self._sdk = openai
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
        self.model = model
        self.voice = voice or OPENAI_VOICE
        known = OPENAI_PRICES.get(model, OPENAI_PRICES["tts-1"])
        self.price_per_million_chars = known if price_per_million_chars is None else price_per_million_chars

    async def synthesize(self, text: str) -> bytes:
        with provider_failures(self._sdk, "speech", [self._client.api_key]):
            response = await self._client.audio.speech.create(
                model=self.model, voice=self.voice, input=text, response_format=AUDIO_FORMAT
            )
            return response.content

    async def aclose(self) -> None:
        await self._client.close()


class EdgeSynthesizer(Synthesizer):
    """Microsoft Edge's read-aloud service through ``edge-tts`` (a websocket; no key, no price)."""

    provider = "edge"

    def __init__(self, *, voice: str | None, timeout: float, price_per_million_chars: float | None) -> None:
        self.voice = voice or EDGE_VOICE
        self.model = self.voice  # Edge has no models: the voice is what was used
        self.price_per_million_chars = price_per_million_chars or 0.0
        self._seconds = max(1, math.ceil(timeout))

    async def synthesize(self, text: str) -> bytes:
        import aiohttp
        import edge_tts  # only when edge is configured
        from edge_tts import exceptions

        audio = bytearray()
        try:
            communicate = edge_tts.Communicate(
                text, self.voice, connect_timeout=self._seconds, receive_timeout=self._seconds
            )
            async for chunk in communicate.stream():
                if chunk["type"] == "audio":
                    audio += chunk.get("data", b"")
        except aiohttp.ClientResponseError as error:  # the handshake was refused
            retryable = error.status == 429 or error.status >= 500
            raise ProviderError(f"Edge refused the connection (HTTP {error.status})", retryable=retryable,
                                status=error.status, kind="http") from None  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, exceptions.WebSocketError) as error:
            raise ProviderError(f"Edge could not be reached: {error or type(error).__name__}",
                                retryable=True, kind="connection") from None  # fmt: skip
        except exceptions.EdgeTTSException as error:  # no audio, or an answer edge-tts does not know
            raise ProviderError(f"Edge sent no usable audio: {error}", retryable=False,
                                kind="error") from None  # fmt: skip
        except ValueError as error:  # edge-tts checks the voice name
            raise ProviderError(f"Edge cannot use voice {self.voice!r}: {error}", retryable=False,
                                kind="error") from None  # fmt: skip
        return bytes(audio)
