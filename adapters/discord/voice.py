"""A voice note as a Discord voice message (pure; the call lives in the adapter).

Discord shows a message as a voice message (a player with the waveform, like a phone's recording) when
it carries the ``IS_VOICE_MESSAGE`` flag, exactly one OGG/Opus attachment that says its
``duration_secs`` and ``waveform`` (base64 of up to 256 loudness bytes), and no text. discord.py 2.x
has no parameter for the two attachment fields, so :class:`VoiceFile` adds them to the attachment's
entry in ``payload_json``. Where Discord will not take a voice message (a server that denies the "Send
Voice Messages" permission), the same file goes as an ordinary audio attachment, which Discord plays
inline too: :func:`plain_attachment`.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import discord

from adapters.base import OutboundVoice

VOICE_FILE_NAME = "voice-message.ogg"
AUDIO_FILE_NAME = "answer.ogg"
VOICE_FLAGS = discord.MessageFlags(voice=True)


class VoiceFile(discord.File):
    """An upload whose attachment entry carries a voice message's duration and waveform."""

    def __init__(self, voice: OutboundVoice) -> None:
        super().__init__(io.BytesIO(voice.data), filename=VOICE_FILE_NAME)
        self.voice = voice

    def to_dict(self, index: int) -> dict[str, Any]:
        payload = super().to_dict(index)
        payload["duration_secs"] = round(self.voice.duration, 2)
        payload["waveform"] = base64.b64encode(self.voice.waveform[:256]).decode("ascii")
        return payload


def plain_attachment(voice: OutboundVoice) -> discord.File:
    """The voice note as an ordinary audio file (Discord plays an OGG attachment inline)."""
    return discord.File(io.BytesIO(voice.data), filename=AUDIO_FILE_NAME)


def refused_as_voice(error: discord.HTTPException) -> bool:
    """Whether Discord refused the voice message itself (a 4xx other than a rate limit), so an ordinary
    attachment may still go through; a 429 or a 5xx is retried as a voice message later."""
    return 400 <= error.status < 500 and error.status != 429
