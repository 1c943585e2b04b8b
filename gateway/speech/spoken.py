"""What of an answer is read aloud, and whether the written answer must go beside the voice note.

A model answers in Markdown; reading it literally ("asterisk asterisk", a URL letter by letter, a
table cell by cell, forty lines of code) is useless. So the answer is parsed (pyromark, CommonMark
with tables) and spoken as its prose: formatting marks dropped, a heading, a list item or a
paragraph each a sentence, a link by its words. What is for the eyes is not read: a code block
becomes "The code is in the message.", a table "The table is in the message.", a bare web address
"a link", an image nothing. Such an answer comes with its text beside the voice note, and so does one
whose spoken form is longer than ``text_over`` characters, or that was cut at ``max_chars`` (speech is
billed per character; the cut falls at a sentence end and says "The rest is in the message.").

Pure functions: no I/O, tested on their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pyromark

CODE_LINE = "The code is in the message."
TABLE_LINE = "The table is in the message."
CUT_LINE = "The rest is in the message."
LINK_WORDS = "a link"
_OPTIONS = pyromark.Options.ENABLE_TABLES | pyromark.Options.ENABLE_STRIKETHROUGH
_BARE_URL = re.compile(r"(?:https?://|www\.)[^\s<>()\[\]]+[^\s<>()\[\].,;:!?'\"]")
_SENTENCE_END = re.compile(r"[.!?…:;](?:[\"')\]]*)\s")
_BLOCKS = {"Paragraph", "Heading", "Item", "BlockQuote", "TableCell", "DefinitionListTitle"}


@dataclass(frozen=True)
class Spoken:
    """``text``: what is read aloud; ``beside``: the written answer must go beside the voice note."""

    text: str
    beside: bool
    cut: bool = False


@dataclass
class _Reader:
    """Walks pyromark's events, collecting sentences and what only the eyes can take in."""

    sentences: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    skipping: list[str] = field(default_factory=list)  # code blocks, tables, images being passed over
    for_the_eyes: bool = False  # code, a table, a link or an image: the text goes beside

    def event(self, event: Any) -> None:
        if isinstance(event, str):  # SoftBreak, HardBreak, Rule
            if not self.skipping and event in ("SoftBreak", "HardBreak"):
                self.current.append(" ")
            return
        [(kind, value)] = event.items()
        if kind == "Start":
            self._start(_name(value), value)
        elif kind == "End":
            self._end(_name(value))
        elif self.skipping:
            return
        elif kind == "Text":
            self.current.append(self._words(value))
        elif kind == "Code":  # inline code: a name or a short command, read as written
            self.current.append(value)

    def _start(self, name: str, value: Any) -> None:
        if name in ("CodeBlock", "Table", "Image", "HtmlBlock", "MetadataBlock"):
            self.skipping.append(name)
        if name in _BLOCKS and not self.skipping:
            self._close_sentence()
        if name in ("CodeBlock", "Table", "Image") or (name == "Link" and not self.skipping):
            self.for_the_eyes = True

    def _end(self, name: str) -> None:
        if self.skipping and self.skipping[-1] == name:
            self.skipping.pop()
            if not self.skipping and name in ("CodeBlock", "Table"):
                self._close_sentence()
                self._say(CODE_LINE if name == "CodeBlock" else TABLE_LINE)
            return
        if name in _BLOCKS and not self.skipping:
            self._close_sentence()

    def _words(self, text: str) -> str:
        if _BARE_URL.search(text):
            self.for_the_eyes = True
            return _BARE_URL.sub(LINK_WORDS, text)
        return text

    def _close_sentence(self) -> None:
        sentence = " ".join("".join(self.current).split())
        self.current.clear()
        if not sentence:
            return
        if sentence[-1].isalnum() or sentence[-1] in "\"')]*%":
            sentence += "."
        self.sentences.append(sentence)

    def _say(self, line: str) -> None:
        if not self.sentences or self.sentences[-1] != line:  # two code blocks in a row: said once
            self.sentences.append(line)

    def text(self) -> str:
        self._close_sentence()
        return "\n".join(self.sentences)


def _name(value: Any) -> str:
    """The tag of a Start/End event's value: ``"Paragraph"`` or ``{"Heading": {...}}``."""
    return value if isinstance(value, str) else next(iter(value))


def spoken_form(markdown: str, *, text_over: int, max_chars: int) -> Spoken:
    """``markdown`` as it is read aloud (see the module docstring)."""
    reader = _Reader()
    for event in pyromark.events(markdown, options=_OPTIONS):
        reader.event(event)
    text = reader.text()
    if len(text) > max_chars:
        return Spoken(cut_at_sentence(text, max_chars - len(CUT_LINE) - 1) + "\n" + CUT_LINE, True, True)
    return Spoken(text, reader.for_the_eyes or len(text) > text_over)


def cut_at_sentence(text: str, limit: int) -> str:
    """The longest start of ``text`` within ``limit`` characters that ends a sentence (or a word, when
    no sentence ends in its second half)."""
    head = text[: limit + 1]
    ends = [match.end() for match in _SENTENCE_END.finditer(head) if match.end() <= limit + 1]
    if ends and ends[-1] > limit // 2:
        return head[: ends[-1]].rstrip()
    space = head.rfind(" ", 0, limit + 1)
    return head[: space if space > 0 else limit].rstrip()
