"""Counting text the way Telegram does: in UTF-16 code units.

Python indexes strings by code point; Telegram's 4,096 limit and its entity offsets count UTF-16
code units, where a character outside the Basic Multilingual Plane (most emoji) takes two. Every
conversion between the two lives here so no caller re-derives it.

Lone surrogates (U+D800..U+DFFF on their own) are legal in a Python ``str`` but not in UTF-16 or
UTF-8. They are counted as one code unit each, which is what they occupy when encoded with
``surrogatepass``; a high surrogate followed by a low one therefore counts 2, like the astral
character it spells. Nothing here raises on them. ``gateway.delivery.text.sanitize`` replaces them before
text leaves the gateway.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate


def _units(char: str) -> int:
    return 2 if ord(char) > 0xFFFF else 1


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (astral characters count 2, lone surrogates 1)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def utf16_offsets(text: str) -> list[int]:
    """``table[i]`` is the UTF-16 offset of ``text[i]``; ``table[len(text)]`` is ``utf16_len(text)``.

    Build it once when converting many positions of the same text (splitting, entity clipping).
    """
    return [0, *accumulate(_units(char) for char in text)]


def to_utf16_offset(text: str, index: int) -> int:
    """UTF-16 offset of code-point position ``index`` (0..len(text)) of ``text``."""
    if not 0 <= index <= len(text):
        raise ValueError(f"index {index} outside 0..{len(text)}")
    return utf16_len(text[:index])


def from_utf16_offset(text: str, offset: int) -> int:
    """Code-point position of UTF-16 ``offset`` in ``text``.

    Raises ``ValueError`` when ``offset`` is out of range or falls between the two code units of an
    astral character: such an offset names no position of the Python string.
    """
    table = utf16_offsets(text)
    index = bisect_left(table, offset)
    if index == len(table) or table[index] != offset:
        raise ValueError(f"UTF-16 offset {offset} is not a character boundary of the text")
    return index
