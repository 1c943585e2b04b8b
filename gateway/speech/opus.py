"""An audio file (MP3 from a speech service, or whatever a compatible server sent) as a voice note:
OGG/Opus, mono, 48 kHz, with its duration and loudness outline.

Telegram plays an OGG/Opus file sent with ``sendVoice`` as a voice message, and Discord accepts only
that for one; both services send MP3, so every answer is decoded and encoded again here, with PyAV
(FFmpeg's libraries, bundled in its wheel: no ffmpeg program needed). Opus at 32 kbit/s is what phones
record voice notes at: a minute of speech is about 240 kB. The duration is counted from the samples
(not from a header that may lie), and the waveform Discord draws is the loudness (mean amplitude) of
each of up to 256 stretches of the note.

CPU-bound (about a tenth of a second per minute of speech): run it in a thread.
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

from adapters.base import OutboundVoice

if TYPE_CHECKING:
    import av

SAMPLE_RATE = 48_000  # Opus works at 48 kHz
BIT_RATE = 32_000
WAVEFORM_POINTS = 256  # Discord's limit
WAVEFORM_PER_SECOND = 10  # one point per 100 ms for a short note, as Discord's own client draws it


class NotAudio(Exception):
    """The bytes are not audio that can be decoded, or hold no sound; the message says which."""


def voice_note(audio: bytes) -> OutboundVoice:
    """``audio`` (any container FFmpeg reads) as an OGG/Opus voice note. Raises :class:`NotAudio`."""
    # PyAV (FFmpeg's libraries, ~20 MiB of RSS) only once a voice note is made: most processes never make one
    import av
    import av.error

    try:
        with av.open(io.BytesIO(audio), mode="r") as source:
            if not source.streams.audio:
                raise NotAudio("the speech service's answer has no audio in it")
            stream = source.streams.audio[0]
            resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
            levels: list[tuple[int, int]] = []  # (samples, their summed amplitude) of each frame
            encoded = io.BytesIO()
            with av.open(encoded, mode="w", format="ogg") as sink:
                opus = sink.add_stream("libopus", rate=SAMPLE_RATE, layout="mono")
                opus.bit_rate = BIT_RATE
                for frame in source.decode(stream):
                    _encode(sink, opus, resampler.resample(frame), levels)
                _encode(sink, opus, resampler.resample(None), levels)
                for packet in opus.encode(None):
                    sink.mux(packet)
    except av.error.FFmpegError as error:
        raise NotAudio(f"the speech service's answer is not audio FFmpeg can read ({error})") from None
    samples = sum(count for count, _ in levels)
    if samples == 0:
        raise NotAudio("the speech service's answer holds no sound")
    return OutboundVoice(encoded.getvalue(), samples / SAMPLE_RATE, waveform(levels))


def _encode(
    sink: av.container.OutputContainer,
    opus: av.audio.stream.AudioStream,
    frames: Iterable[av.AudioFrame],
    levels: list[tuple[int, int]],
) -> None:
    for frame in frames:
        values = array("h", bytes(frame.planes[0]))[: frame.samples]
        levels.append((frame.samples, sum(map(abs, values))))
        for packet in opus.encode(frame):
            sink.mux(packet)


def waveform(levels: list[tuple[int, int]]) -> bytes:
    """The loudness outline: the note cut into equal stretches (one per 100 ms, at most 256), each the
    mean amplitude of the frames that start in it, scaled so the loudest stretch is 255."""
    total = sum(count for count, _ in levels)
    points = max(1, min(WAVEFORM_POINTS, round(total / SAMPLE_RATE * WAVEFORM_PER_SECOND)))
    amplitude, samples = [0] * points, [0] * points
    position = 0
    for count, summed in levels:
        index = min(points - 1, position * points // total) if total else 0
        amplitude[index] += summed
        samples[index] += count
        position += count
    means = [summed / count if count else 0.0 for summed, count in zip(amplitude, samples, strict=True)]
    loudest = max(means) or 1.0
    return bytes(round(mean * 255 / loudest) for mean in means)
