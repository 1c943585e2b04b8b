"""What of an answer is read aloud (gateway.speech.spoken) and the voice note it becomes
(gateway.speech.opus): pure functions, no gateway."""

from __future__ import annotations

import io

import av
import pytest

from gateway.speech.opus import NotAudio, voice_note, waveform
from gateway.speech.spoken import CODE_LINE, CUT_LINE, LINK_WORDS, TABLE_LINE, cut_at_sentence, spoken_form
from tests.emulator.speech import FORMATS, tone


def said(markdown: str, *, text_over: int = 600, max_chars: int = 2000) -> tuple[str, bool]:
    spoken = spoken_form(markdown, text_over=text_over, max_chars=max_chars)
    return spoken.text, spoken.beside


def test_formatting_marks_are_not_read_and_blocks_become_sentences() -> None:
    text, beside = said("## Plan\nIt is **sunny**, _warm_ and ~~wet~~ dry.\n\n- pack `sunscreen`\n- go at 9")
    assert text == "Plan.\nIt is sunny, warm and wet dry.\npack sunscreen.\ngo at 9."
    assert not beside  # short prose: the voice note alone


def test_code_blocks_are_not_read_and_the_text_goes_beside() -> None:
    text, beside = said("Run this:\n\n```sh\nrm -rf build\n```\n\n```python\nprint(1)\n```\n\nThen wait.")
    assert text == f"Run this:\n{CODE_LINE}\nThen wait."  # two blocks in a row: said once
    assert "rm -rf" not in text and beside


def test_links_tables_and_images_are_for_the_eyes() -> None:
    text, beside = said("See [the docs](https://example.org/docs) or https://example.org/faq.")
    assert text == f"See the docs or {LINK_WORDS}." and beside
    text, beside = said("| city | temp |\n|---|---|\n| Berlin | 20 |\n\nWarm everywhere.")
    assert text == f"{TABLE_LINE}\nWarm everywhere." and beside
    text, beside = said("A chart: ![sales](https://x.org/s.png) and <b>bold</b> html.")
    assert text == "A chart: and bold html." and beside


def test_a_long_answer_is_spoken_whole_up_to_the_limit_with_its_text_beside() -> None:
    prose = "Word " * 150  # 750 characters
    text, beside = said(prose, text_over=600)
    assert text == prose.strip() + "." and beside
    assert said(prose, text_over=800) == (prose.strip() + ".", False)


def test_a_longer_answer_is_cut_at_a_sentence_and_says_where_the_rest_is() -> None:
    answer = " ".join(f"Sentence number {n} ends here." for n in range(100))
    spoken = spoken_form(answer, text_over=600, max_chars=300)
    assert spoken.cut and spoken.beside and len(spoken.text) <= 300
    head, rest = spoken.text.split("\n")
    assert head.endswith("ends here.") and answer.startswith(head) and rest == CUT_LINE


def test_a_cut_falls_on_a_word_when_no_sentence_ends_in_reach() -> None:
    assert cut_at_sentence("one two three four five six", 13) == "one two three"
    assert cut_at_sentence("First. " + "x" * 50, 40) == "First."  # the last word does not fit
    assert cut_at_sentence("A b. " + "word " * 20, 40) == "A b. " + "word " * 6 + "word"


@pytest.mark.parametrize("answer_format", ["mp3", "opus", "aac", "flac", "wav"])
def test_any_audio_a_service_sends_becomes_a_mono_opus_voice_note(answer_format: str) -> None:
    container, codec, _ = FORMATS[answer_format]
    note = voice_note(tone(2.5, container, codec))
    with av.open(io.BytesIO(note.data), mode="r") as played:
        [stream] = played.streams.audio
        samples = sum(frame.samples for frame in played.decode(stream))
        assert (played.format.name, stream.codec_context.name) == ("ogg", "opus")
        assert (stream.codec_context.channels, stream.codec_context.sample_rate) == (1, 48000)
    assert 2.5 <= note.duration <= 2.6 and samples / 48000 == pytest.approx(note.duration, abs=0.001)
    assert len(note.waveform) == round(note.duration * 10) and max(note.waveform) == 255


def test_what_is_not_audio_is_refused_with_a_reason() -> None:
    with pytest.raises(NotAudio, match="not audio"):
        voice_note(b"<html>Service unavailable</html>" * 20)


def test_the_waveform_follows_the_loudness_and_stays_within_discords_limit() -> None:
    quiet, loud = (4800, 4800 * 100), (4800, 4800 * 10_000)  # 100 ms frames, mean amplitude 100 vs 10,000
    assert waveform([quiet, loud, quiet, loud]) == bytes([3, 255, 3, 255])
    assert len(waveform([loud] * 1000)) == 256  # 100 s: at most 256 points
