"""OpenAI's transcription API (``POST /v1/audio/transcriptions``), for voice notes.

The emulator does not listen: the transcript is the next scripted one (``emu.script_transcript``), or
else the UTF-8 text after ``SPEECH:`` in the file (test fixtures carry their words that way), or else
a line naming the file's size. Its usage reports the audio's length as OpenAI does for whisper-1
(``{"type": "duration", "seconds": ...}``): the emulator takes a file to hold 32 kbit/s of sound.
Faults queued for ``api="audio"`` (``emu.fail_next(500, api="audio")``) and stalls apply, as for the
model APIs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .openai_api import error_outcome
from .script import HttpFault, StallFault
from .state import EmulatorState
from .wire import Outcome

API = "audio"
SPEECH_MARK = b"SPEECH:"
BYTES_PER_SECOND = 4_000  # the length the emulator bills: as if every file were 32 kbit/s audio
SUPPORTED_SUFFIXES = (".flac", ".m4a", ".mp3", ".mp4", ".mpeg", ".mpga", ".oga", ".ogg", ".wav", ".webm")


@dataclass
class Transcription:
    """One transcription request as received."""

    model: str
    file_name: str
    size: int
    language: str | None
    status: int = 200
    text: str = ""
    seconds: float = 0.0  # the length its usage reported


def transcribe(
    state: EmulatorState, model: str, file_name: str, data: bytes, language: str | None
) -> Outcome:
    with state.lock:
        record = Transcription(model, file_name, len(data), language)
        state.transcriptions.append(record)
        fault = state.faults.take(API, False, early=True)
        if isinstance(fault, HttpFault):
            record.status = fault.status
            return error_outcome(fault.status, retry_after=fault.retry_after)
        if isinstance(fault, StallFault):
            record.status = 504
            out = error_outcome(504, "Gateway timeout: the upstream did not answer")
            out.hold = fault.seconds
            return out
        if not model:
            record.status = 400
            return error_outcome(400, "you must provide a model parameter")
        if not file_name.lower().endswith(SUPPORTED_SUFFIXES):
            record.status = 400
            return error_outcome(
                400, f"Unrecognized file format. Supported formats: {list(SUPPORTED_SUFFIXES)}"
            )
        record.text = state.next_transcript() or _spoken(data)
        record.seconds = round(len(data) / BYTES_PER_SECOND, 3)
        return Outcome(200, {"text": record.text, "usage": {"type": "duration", "seconds": record.seconds}})


def _spoken(data: bytes) -> str:
    _, mark, rest = data.partition(SPEECH_MARK)
    if mark:
        return rest.split(b"\x00", 1)[0].decode("utf-8", errors="replace").strip()
    return f"(emulated transcript of {len(data)} bytes of audio)"
