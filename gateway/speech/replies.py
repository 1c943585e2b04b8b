"""Spoken replies: which answers come back as a voice note, and the outbox operations that send one.

``tts.mode`` says which answers are spoken: ``voice_in`` the answer to a voice note (a Telegram voice
message, a Discord voice message; not an audio file), ``always`` every answer of a turn, ``off`` none;
only where the platform plays voice notes (``Capabilities.voice_notes``: not the terminal), and never an
error, a refusal or a stopped answer. A spoken answer is not streamed (the chat shows "typing…" until
the voice note is ready): words shown while the model writes, then spoken, would come twice.

What is spoken and when the text goes beside it: :mod:`gateway.speech.spoken`. The voice note goes
first, as the reply; the text, when it goes too, follows it as ordinary messages. A voice note alone
keeps its words as the outbox item's text, so a platform that refuses the voice note gets them instead
(``gateway.delivery.sender``).

The synthesis goes through the agent's one road to paid services (``ModelCalls.speak``): charged to
the turn's chat and person like its model requests (a voice note over a spend limit is not made: the
text goes), recorded as a "speech" request with its characters (``herald insights``). Synthesis that
fails for any reason (the service, a timeout, audio that does not decode, a limit) sends the text
instead, with one log line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from adapters.base import Capabilities, ChatAddress, InboundMessage, OutboundText
from agent.api import ModelCalls, ProviderError, RetryPolicy, SessionRecord, Synthesizer
from agent.settings import TextToSpeechSettings
from gateway.delivery.stream import answer_operations, render
from gateway.ledger.outbox import Operation, Outgoing
from gateway.speech.opus import NotAudio, voice_note
from gateway.speech.spoken import spoken_form

log = logging.getLogger(__name__)

VOICE_KINDS = ("voice",)  # what ``voice_in`` answers: a voice note, not a music file or a video


class SpokenReplies:
    """Decides which answers are spoken and makes their operations; ``synthesizer`` None: none are."""

    def __init__(
        self,
        settings: TextToSpeechSettings,
        synthesizer: Synthesizer | None,
        calls: ModelCalls,
        retry: RetryPolicy,
    ) -> None:
        self.settings = settings
        self.synthesizer = synthesizer
        self.calls = calls
        self.retry = retry

    def wanted(self, message: InboundMessage, capabilities: Capabilities) -> bool:
        """Whether the answer to ``message`` is to be spoken (before the turn: it is then not streamed)."""
        mode = self.settings.mode
        if self.synthesizer is None or mode == "off" or not capabilities.voice_notes:
            return False
        return mode == "always" or any(attachment.kind in VOICE_KINDS for attachment in message.attachments)

    async def operations(
        self,
        capabilities: Capabilities,
        address: ChatAddress,
        answer: str,
        *,
        session: SessionRecord,
        reply_to: str | None,
        written: str | None = None,
        streamed: Sequence[str] = (),
    ) -> list[Outgoing] | None:
        """The voice note of ``answer`` (the model's words) and, when it goes too, the text ``written``
        (the answer with the lines under it; default ``answer``) editing the ``streamed`` messages. None
        when no voice note could be made: the caller sends the text (logged here)."""
        synthesizer = self.synthesizer
        if synthesizer is None:
            return None
        written = answer if written is None else written
        settings = self.settings
        spoken = spoken_form(answer, text_over=settings.text_over_chars, max_chars=settings.max_chars)
        parts = render(written, capabilities)
        beside = spoken.beside or written != answer or len(parts) > 1 or bool(streamed)
        if not spoken.text:
            return None  # nothing to say (an empty answer): the text says "(no answer)"
        where = f"{address.platform} chat {address.chat_id}"
        try:
            audio = await self.calls.speak(
                synthesizer, spoken.text, session=session, policy=self.retry, timeout=settings.timeout
            )
            voice = await asyncio.to_thread(voice_note, audio)
        except (ProviderError, NotAudio) as error:  # a spend limit is a ProviderError too (OverBudget)
            log.warning("spoken reply to %s: no voice note (%s); sending the text", where, error)
            return None
        log.info("spoken reply to %s: %d characters, %.1f s of voice%s", where, len(spoken.text),
                 voice.duration, " and the text" if beside else "")  # fmt: skip
        words = OutboundText("") if beside else parts[0]
        operations = [Outgoing(address, Operation.SEND_VOICE, words, reply_to=reply_to, voice=voice)]
        if beside:
            text = answer_operations(capabilities, address, written, streamed=list(streamed), reply_to=None)
            operations += text
        return operations
