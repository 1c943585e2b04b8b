"""OpenAI's speech API (``POST /v1/audio/speech``), for spoken replies.

The emulator does not speak: it answers with real audio of a plausible length (a tone whose pitch
rises and falls, about 15 characters a second, as a voice reads), made with PyAV in the format asked
for (``mp3`` by default, ``opus`` in OGG, ``aac`` in ADTS, ``flac``, ``wav``, raw 24 kHz ``pcm``), so
a client has to decode it like the real thing. It checks what the API checks (a model, a voice, an
input of at most 4096 characters, a known format). Faults queued for ``api="speech"``
(``emu.fail_next(500, api="speech")``) and stalls apply, as for the model APIs.

It also stands in for Microsoft Edge's read-aloud websocket (``EDGE_PATH``), which ``edge-tts`` speaks
to: a test points ``edge_tts.communicate.WSS_URL`` at it, and gets the same tone as MP3 in the frames
that service sends.
"""

from __future__ import annotations

import functools
import html
import io
import math
import re
from array import array
from dataclasses import dataclass
from typing import Any

import av

from .openai_api import error_outcome
from .script import HttpFault, StallFault
from .state import EmulatorState
from .wire import Outcome

API = "speech"
MAX_INPUT = 4096
CHARACTERS_PER_SECOND = 15.0
SAMPLE_RATE = 24_000  # what OpenAI's voices are made at (and its pcm format is)
# format -> (container, codec, content type)
FORMATS = {
    "mp3": ("mp3", "mp3", "audio/mpeg"),
    "opus": ("ogg", "libopus", "audio/ogg"),
    "aac": ("adts", "aac", "audio/aac"),
    "flac": ("flac", "flac", "audio/flac"),
    "wav": ("wav", "pcm_s16le", "audio/wav"),
    "pcm": ("s16le", "pcm_s16le", "audio/pcm"),
}


@dataclass
class Speech:
    """One speech request as received, and the length of the audio it got."""

    model: str
    voice: str
    input: str
    response_format: str
    status: int = 200
    seconds: float = 0.0


def seconds_for(text: str) -> float:
    """How long the emulated voice takes to say ``text``."""
    return max(0.5, len(text) / CHARACTERS_PER_SECOND)


def admit(state: EmulatorState, body: dict[str, Any]) -> Outcome | Speech:
    """The error to answer ``body`` with, or the accepted request (its audio: :func:`audio_of`)."""
    text = body.get("input")
    fmt = str(body.get("response_format") or "mp3")
    record = Speech(str(body.get("model") or ""), str(body.get("voice") or ""), str(text or ""), fmt)
    with state.lock:
        state.speeches.append(record)
        fault = state.faults.take(API, False, early=True)
        if isinstance(fault, HttpFault):
            record.status = fault.status
            return error_outcome(fault.status, retry_after=fault.retry_after)
        if isinstance(fault, StallFault):
            record.status = 504
            out = error_outcome(504, "Gateway timeout: the upstream did not answer")
            out.hold = fault.seconds
            return out
        problem = _problem(record)
        if problem is not None:
            record.status = 400
            return error_outcome(400, problem)
        record.seconds = seconds_for(record.input)
        return record


def audio_of(record: Speech) -> Outcome:
    """The answer to an accepted request: its audio (CPU-bound: the server runs it in a thread)."""
    container, codec, content_type = FORMATS[record.response_format]
    return Outcome(200, raw=tone(record.seconds, container, codec), headers={"Content-Type": content_type})


def _problem(record: Speech) -> str | None:
    if not record.model:
        return "you must provide a model parameter"
    if not record.voice:
        return "you must provide a voice parameter"
    if not record.input.strip():
        return "input must not be empty"
    if len(record.input) > MAX_INPUT:
        return (
            f"string too long. Expected a string with maximum length {MAX_INPUT}, but got a string with "
            f"length {len(record.input)} instead."
        )
    if record.response_format not in FORMATS:
        return f"Invalid value: '{record.response_format}'. Supported values are: {', '.join(FORMATS)}."
    return None


@functools.cache
def _second(rate: int) -> bytes:
    """One second of a voice-like tone: a pitch gliding around 220 Hz, in two syllables with a pause
    after each."""
    samples = array("h")
    phase = 0.0
    for n in range(rate):
        t = n / rate
        phase += 2 * math.pi * (220 + 40 * math.sin(2 * math.pi * t)) / rate
        loudness = 0.05 + 0.95 * max(0.0, math.sin(2 * math.pi * 2 * t))
        samples.append(int(12000 * loudness * math.sin(phase)))
    return samples.tobytes()


def tone(seconds: float, container: str = "mp3", codec: str = "mp3", rate: int = SAMPLE_RATE) -> bytes:
    """``seconds`` of a voice-like tone encoded with ``codec`` in ``container``: a real audio file any
    decoder reads."""
    total = int(seconds * rate)
    second = _second(rate)
    out_file = io.BytesIO()
    with av.open(out_file, mode="w", format=container) as sink:
        stream = sink.add_stream(codec, rate=rate)
        assert isinstance(stream, av.AudioStream)
        for start in range(0, total, rate):
            count = min(rate, total - start)
            frame = av.AudioFrame(format="s16", layout="mono", samples=count)
            frame.planes[0].update(second[: count * 2])
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                sink.mux(packet)
        for packet in stream.encode(None):
            sink.mux(packet)
    return out_file.getvalue()


# --- Microsoft Edge's read-aloud service (what edge-tts speaks to) ------------------------------------

EDGE_PATH = "/edge/v1"
_SSML_VOICE = re.compile(r"<voice name='([^']*)'>")
_SSML_TEXT = re.compile(r"<prosody [^>]*>(.*)</prosody>", re.DOTALL)
EDGE_CHUNK = 4096


@dataclass
class EdgeSpeech:
    """One synthesis edge-tts asked for over the websocket: the voice and the text (unescaped)."""

    voice: str
    input: str
    seconds: float = 0.0


def edge_request(state: EmulatorState, ssml_message: str) -> EdgeSpeech:
    """Record what an ``ssml`` message asks for."""
    voice = _SSML_VOICE.search(ssml_message)
    text = _SSML_TEXT.search(ssml_message)
    record = EdgeSpeech(voice.group(1) if voice else "", html.unescape(text.group(1)) if text else "")
    record.seconds = seconds_for(record.input)
    with state.lock:
        state.edge_speeches.append(record)
    return record


def edge_messages(record: EdgeSpeech) -> list[str | bytes]:
    """The service's answer, as it frames it: ``turn.start``, the MP3 in binary messages (a 2-byte header
    length, the header lines, the audio), ``turn.end``."""
    audio = tone(record.seconds)
    head = b"X-RequestId:emulated\r\nContent-Type:audio/mpeg\r\nPath:audio\r\n"
    chunks: list[str | bytes] = [
        len(head).to_bytes(2, "big") + head + audio[start : start + EDGE_CHUNK]
        for start in range(0, len(audio), EDGE_CHUNK)
    ]
    json_head = "X-RequestId:emulated\r\nContent-Type:application/json; charset=utf-8\r\n"
    start = f"{json_head}Path:turn.start\r\n\r\n" + '{"context":{"serviceTag":"emulated"}}'
    end = f"{json_head}Path:turn.end\r\n\r\n" + "{}"
    return [start, *chunks, end]
