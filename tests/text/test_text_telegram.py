"""Telegram's renderer: Markdown to text plus UTF-16 entities, split after formatting, never raising."""

from __future__ import annotations

import itertools
import time

import pytest
import telegramify_markdown
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.base import OutboundText, TextEntity
from adapters.telegram import render as telegram
from adapters.telegram.render import TELEGRAM_LIMIT
from adapters.text import styled
from adapters.text.entities import clip_entities, plain_fallback, split_outbound
from adapters.text.units import utf16_len, utf16_offsets
from gateway.delivery.text.sanitize import sanitize_text
from tests.text_support import (
    any_text,
    assert_valid_part,
    chain_starts,
    clipped,
    entity_tuples,
    markdownish,
)


def render_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[OutboundText]:
    """As the gateway renders an answer for Telegram: sanitized, then Telegram's renderer."""
    return list(telegram.render_telegram(sanitize_text(markdown), limit))


def render_one(markdown: str) -> OutboundText:
    """The whole rendering as one part (a limit nothing reaches)."""
    [whole] = render_telegram(markdown, limit=10**9)
    return whole


def assert_split_of_whole(markdown: str, limit: int) -> list[OutboundText]:
    """The parts are the unsplit rendering cut at whitespace, with its entities clipped per part."""
    parts = render_telegram(markdown, limit)
    for part in parts:
        assert_valid_part(part, limit)
    if not parts:
        assert render_telegram(markdown, limit=10**9) == []
        return parts
    whole = render_one(markdown)
    starts = chain_starts(whole.text, [[part.text] for part in parts])
    assert starts is not None, "parts are not the rendering up to whitespace at split points"
    offsets = utf16_offsets(whole.text)
    for part, start in zip(parts, starts, strict=True):
        utf16_start = offsets[start]
        assert entity_tuples(part) == clipped(whole, utf16_start, utf16_start + utf16_len(part.text))
    return parts


def entity(part: OutboundText, kind: str) -> TextEntity:
    [found] = [e for e in part.entities if e.type == kind]
    return found


# --- Conversion -------------------------------------------------------------------------------


@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t\n", "\x00\x07\r\n"])
def test_blank_input_gives_no_messages(markdown: str) -> None:
    assert render_telegram(markdown) == []


def test_text_without_markdown_passes_through() -> None:
    assert render_telegram("Just a plain answer, 42.") == [OutboundText("Just a plain answer, 42.")]


def test_markdown_becomes_text_and_utf16_entities() -> None:
    [part] = render_telegram("😀 **bold** [link](https://example.com) `code`")
    assert part.text == "😀 bold link code"
    assert entity(part, "bold") == TextEntity("bold", 3, 4)
    assert entity(part, "text_link") == TextEntity("text_link", 8, 4, url="https://example.com")
    assert entity(part, "code") == TextEntity("code", 13, 4)


def test_code_block_becomes_pre_with_language() -> None:
    [part] = render_telegram("Run:\n\n```python\nprint('hi')\n```")
    assert part.text == "Run:\n\nprint('hi')"
    assert entity(part, "pre") == TextEntity("pre", 6, 11, language="python")


def test_nested_blockquotes_become_one_blockquote() -> None:
    [part] = render_telegram("> outer\n>\n> > inner\n\nafter")
    assert [e.type for e in part.entities] == ["blockquote"]
    assert part.entities[0].offset == 0


def test_custom_emoji_keeps_its_id() -> None:
    [part] = render_telegram("![👍](tg://emoji?id=5368324170671202286)")
    assert entity(part, "custom_emoji").custom_emoji_id == "5368324170671202286"


def test_global_telegramify_config_does_not_leak_in() -> None:
    symbols = telegramify_markdown.RenderConfig().markdown_symbol
    saved = symbols.heading_level_1
    symbols.heading_level_1 = "XX"
    try:
        assert render_telegram("# Title")[0].text == "📌 Title"
    finally:
        symbols.heading_level_1 = saved


def test_lone_surrogates_and_control_characters_never_raise() -> None:
    """A character reference is shown as written, so "&#1;" cannot bring a control character back."""
    [part] = render_telegram("**a\ud800b**\x00c\x1b[31m &#1; \ud83d\ude00")
    assert part.text == "a\ufffdbc[31m &#1; 😀"
    assert entity(part, "bold") == TextEntity("bold", 0, 3)
    part.text.encode("utf-8")


def test_converter_failure_falls_back_to_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> tuple[str, list[object]]:
        raise RuntimeError("parser bug")

    monkeypatch.setattr(styled, "convert", broken)
    assert render_telegram("**bold**\r\n") == [OutboundText("**bold**")]


def test_html_only_answer_is_sent_as_plain_text() -> None:
    assert render_telegram("<div>\nhello\n</div>") == [OutboundText("<div>\nhello\n</div>")]


def test_exploding_list_layout_is_sent_as_plain_text_quickly() -> None:
    markdown = "- " * 5000 + "x"
    started = time.process_time()  # this process's CPU time: a loaded machine does not stretch it
    parts = render_telegram(markdown)
    assert time.process_time() - started < 2
    assert all(not part.entities for part in parts)
    assert "".join(part.text for part in parts).replace(" ", "") == markdown.replace(" ", "")


def test_plain_fallback_keeps_text_and_drops_entities() -> None:
    part = OutboundText("bold", (TextEntity("bold", 0, 4),))
    assert plain_fallback(part) == OutboundText("bold")


def test_limit_below_two_units_is_refused() -> None:
    with pytest.raises(ValueError):
        render_telegram("text", limit=1)


# --- Splitting after formatting ----------------------------------------------------------------


def long_answer() -> str:
    sections = []
    for number, language in enumerate(["python", "bash", "json", "python"]):
        code = "\n".join(f"    step_{number}_{i} = compute({i}, 'value')  # 😀 note" for i in range(90))
        prose = " ".join(f"**Point {i}** explains [it](https://example.com/{i}) briefly." for i in range(12))
        sections.append(f"## Section {number}\n\n{prose}\n\n```{language}\n{code}\n```")
    return "\n\n".join(sections)


def test_ten_thousand_char_answer_splits_into_valid_parts_keeping_code_language() -> None:
    markdown = long_answer()
    assert len(markdown) > 10_000
    parts = assert_split_of_whole(markdown, TELEGRAM_LIMIT)
    assert len(parts) >= 3
    crossings = 0
    for before, after in itertools.pairwise(parts):
        last = max(before.entities, key=lambda e: e.offset + e.length)
        first = min(after.entities, key=lambda e: e.offset)
        if last.type == "pre" and last.offset + last.length == utf16_len(before.text) and first.offset == 0:
            assert first.type == "pre" and first.language == last.language
            crossings += 1
    assert crossings >= 1  # a code block did cross a split, and kept its language


def test_emoji_at_the_limit_moves_whole_to_the_next_part() -> None:
    markdown = "a" * (TELEGRAM_LIMIT - 1) + "😀b"
    parts = render_telegram(markdown)
    assert [p.text for p in parts] == ["a" * (TELEGRAM_LIMIT - 1), "😀b"]


def test_entity_across_the_limit_is_clipped_at_a_character_boundary() -> None:
    markdown = "**" + "a" * (TELEGRAM_LIMIT - 1) + "😀😀**"
    first, second = assert_split_of_whole(markdown, TELEGRAM_LIMIT)
    assert first.entities == (TextEntity("bold", 0, TELEGRAM_LIMIT - 1),)
    assert second.entities == (TextEntity("bold", 0, 4),)


def test_very_long_single_line_splits_between_words() -> None:
    markdown = " ".join(f"word{i}" for i in range(4000))
    parts = assert_split_of_whole(markdown, TELEGRAM_LIMIT)
    assert len(parts) > 5
    assert " ".join(p.text for p in parts) == markdown


def test_single_5000_char_word_is_hard_cut() -> None:
    parts = render_telegram("x" * 5000)
    assert [utf16_len(p.text) for p in parts] == [TELEGRAM_LIMIT, 5000 - TELEGRAM_LIMIT]


def test_split_pre_stays_pre_with_language_in_both_parts() -> None:
    code = "\n".join(f"line_{i} = {i}" for i in range(20))
    first, *rest = assert_split_of_whole(f"```rust\n{code}\n```", 100)
    assert rest
    for part in (first, *rest):
        assert part.entities == (TextEntity("pre", 0, utf16_len(part.text), language="rust"),)


def test_clip_entities_rebases_and_drops_empty_pieces() -> None:
    entities = (TextEntity("bold", 2, 6), TextEntity("italic", 0, 2), TextEntity("pre", 5, 10, language="c"))
    assert clip_entities(entities, 4, 9) == (
        TextEntity("bold", 0, 4),
        TextEntity("pre", 1, 4, language="c"),
    )


def test_split_outbound_splits_any_formatted_text() -> None:
    message = OutboundText("alpha beta\n\ngamma", (TextEntity("italic", 6, 11),))
    assert split_outbound(message, 10) == [
        OutboundText("alpha beta", (TextEntity("italic", 6, 4),)),
        OutboundText("gamma", (TextEntity("italic", 0, 5),)),
    ]


# --- Properties -------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(text=any_text, limit=st.integers(min_value=2, max_value=200))
def test_any_text_renders_to_valid_parts(text: str, limit: int) -> None:
    assert_split_of_whole(text, limit)


@settings(max_examples=60, deadline=None)
@given(markdown=markdownish, limit=st.integers(min_value=2, max_value=800))
def test_markdown_renders_to_valid_parts_with_clipped_entities(markdown: str, limit: int) -> None:
    assert_split_of_whole(markdown, limit)


@settings(max_examples=20, deadline=None)
@given(markdown=markdownish.map(lambda m: m * 8))
def test_long_markdown_renders_within_the_telegram_limit(markdown: str) -> None:
    assert_split_of_whole(markdown, TELEGRAM_LIMIT)
