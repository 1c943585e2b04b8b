"""UTF-16 counting and sanitizing: the two places where Python strings and platforms disagree."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from adapters.text.controls import mask_controls
from adapters.text.units import from_utf16_offset, to_utf16_offset, utf16_len, utf16_offsets
from agent.files.text import valid_text
from gateway.delivery.text.sanitize import sanitize_text
from tests.text_support import any_text


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("", 0),
        ("abc", 3),
        ("é中", 2),
        ("😀", 2),
        ("a😀b", 4),
        ("👍🏽", 4),
        ("\ud800", 1),  # a lone surrogate
        ("\ud83d\ude00", 2),  # a surrogate pair stored as two code points
    ],
)
def test_utf16_len_counts_code_units(text: str, units: int) -> None:
    assert utf16_len(text) == units


def test_offsets_convert_both_ways() -> None:
    text = "a😀b"
    assert utf16_offsets(text) == [0, 1, 3, 4]
    assert [to_utf16_offset(text, i) for i in range(4)] == [0, 1, 3, 4]
    assert [from_utf16_offset(text, o) for o in (0, 1, 3, 4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("offset", [-1, 2, 5])
def test_offset_inside_an_astral_character_or_out_of_range_is_refused(offset: int) -> None:
    with pytest.raises(ValueError):
        from_utf16_offset("a😀b", offset)


def test_code_point_index_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError):
        to_utf16_offset("ab", 3)


def test_surrogate_pairs_are_joined_and_lone_surrogates_replaced() -> None:
    assert valid_text("\ud83d\ude00") == "😀"
    assert valid_text("a\ud800b\udc00") == "a\ufffdb\ufffd"


def test_sanitize_normalizes_line_endings_and_drops_controls() -> None:
    assert sanitize_text("a\r\nb\rc\x00d\x1b[0m\x7fe\x85f\tg\u200dh") == "a\nb\ncd[0mef\tg\u200dh"


def test_mask_controls_keeps_length() -> None:
    assert mask_controls("a\x01b\r\n\t") == "a\ufffdb\ufffd\n\t"


@settings(max_examples=200, deadline=None)
@given(text=any_text)
def test_units_agree_with_utf16_encoding(text: str) -> None:
    table = utf16_offsets(text)
    assert table[-1] == utf16_len(text) == len(text.encode("utf-16-le", "surrogatepass")) // 2
    assert all(from_utf16_offset(text, table[i]) == i for i in range(0, len(text) + 1, 7))


@settings(max_examples=200, deadline=None)
@given(text=any_text)
def test_sanitized_text_always_encodes(text: str) -> None:
    clean = sanitize_text(text)
    clean.encode("utf-8")
    assert "\r" not in clean
    assert sanitize_text(clean) == clean
