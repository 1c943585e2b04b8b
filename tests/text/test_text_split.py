"""split_markdown and render_markdown: Markdown split to a limit, code fences repaired, nothing lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.base import Capabilities
from adapters.text import fences
from adapters.text.markdown import render_markdown as markdown_renderer
from adapters.text.split import split_markdown
from adapters.text.units import utf16_len
from gateway.delivery.stream import EMPTY_ANSWER, render
from tests.text_support import (
    any_text,
    chain_starts,
    markdown_readings,
    markdownish,
    open_fence_at_end,
)

DISCORD_LIMIT = 2000  # adapters.discord's max_message_length


def assert_preserved(text: str, parts: list[str]) -> None:
    assert chain_starts(text, [markdown_readings(part) for part in parts]) is not None


def code_block(language: str, lines: int, width: int = 40) -> str:
    body = "\n".join(f"    value_{i} = {'x' * (width - 16)}  # {i}" for i in range(lines))
    return f"```{language}\n{body}\n```"


def render_markdown(text: str, limit: int) -> list[str]:
    """An answer as the gateway renders it for a platform that shows Markdown (Discord's limit unit)."""
    capabilities = Capabilities(limit, "chars", markdown_renderer, can_edit=True, has_threads=True)
    return [part.text for part in render(text, capabilities)]

# --- Breaks ---------------------------------------------------------------------------------------


def test_text_within_the_limit_is_one_part() -> None:
    assert split_markdown("Hello **world**", 2000) == ["Hello **world**"]


@pytest.mark.parametrize("text", ["", " ", "\n\n\t \n"])
def test_blank_text_gives_no_parts(text: str) -> None:
    assert split_markdown(text, 10) == []


def test_paragraph_break_is_preferred_over_line_and_word() -> None:
    text = "first paragraph\n\nsecond line one\nsecond line two"
    assert split_markdown(text, 40) == ["first paragraph", "second line one\nsecond line two"]


def test_line_break_is_preferred_over_word() -> None:
    text = "alpha beta gamma\ndelta epsilon zeta"
    assert split_markdown(text, 25) == ["alpha beta gamma", "delta epsilon zeta"]


def test_long_line_splits_between_words() -> None:
    text = " ".join(f"word{i}" for i in range(400))
    parts = split_markdown(text, 100)
    assert all(len(part) <= 100 for part in parts)
    assert " ".join(parts) == text


def test_single_over_long_word_is_hard_cut() -> None:
    word = "x" * 5000
    parts = split_markdown(word, 2000)
    assert [len(part) for part in parts] == [2000, 2000, 1000]
    assert "".join(parts) == word


def test_only_the_over_long_word_is_hard_cut() -> None:
    text = "short words here " + "y" * 50 + " tail"
    assert split_markdown(text, 30) == ["short words here", "y" * 30, "y" * 20 + " tail"]


def test_hard_cut_keeps_emoji_with_modifier_together() -> None:
    text = "👍🏽" * 40  # 80 code points, no spaces
    parts = split_markdown(text, 15)
    assert all(len(part) <= 15 for part in parts)
    assert all(not part.startswith("🏽") for part in parts)
    assert "".join(parts) == text


def test_measure_in_utf16_keeps_astral_characters_whole() -> None:
    text = "😀" * 10
    parts = split_markdown(text, 5, measure=utf16_len)
    assert parts == ["😀😀", "😀😀", "😀😀", "😀😀", "😀😀"]


def test_limit_too_small_for_one_character_raises() -> None:
    with pytest.raises(ValueError):
        split_markdown("😀", 1, measure=utf16_len)
    with pytest.raises(ValueError):
        split_markdown("text", 0)


def test_whitespace_is_dropped_only_at_split_points() -> None:
    text = "  indented first line\n\n\n   \n- item one\n  - nested item"
    parts = split_markdown(text, 25)
    assert parts == ["  indented first line", "- item one", "  - nested item"]
    assert_preserved(text, parts)


# --- Code fences ------------------------------------------------------------------------------


def test_fence_crossing_a_split_is_closed_and_reopened_with_its_language() -> None:
    text = "Intro.\n\n" + code_block("python", 12) + "\n\nOutro."
    parts = split_markdown(text, 200)
    assert len(parts) > 2
    assert all(len(part) <= 200 for part in parts)
    code_parts = [p for p in parts if "value_" in p]
    assert all(p.startswith("```python\n") for p in code_parts)
    assert all(open_fence_at_end(p) is None for p in parts)
    assert parts[0] == "Intro."
    assert parts[-1].endswith("```\n\nOutro.") or parts[-1] == "Outro."
    assert_preserved(text, parts)


def test_tilde_and_long_fences_are_reopened_as_written() -> None:
    body = "\n".join(f"line {i} with some text" for i in range(20))
    for opener, closer in (("~~~js", "~~~"), ("````md", "````"), ("   ```sh", "   ```")):
        text = f"{opener}\n{body}\n{closer}"
        parts = split_markdown(text, 120)
        assert len(parts) > 1
        for part in parts:
            assert part.startswith(opener + "\n")
            assert part.endswith("\n" + closer)
            assert len(part) <= 120
        assert_preserved(text, parts)


def test_fence_lines_count_toward_the_limit() -> None:
    text = code_block("python", 30)
    for limit in (60, 61, 97, 150):
        parts = split_markdown(text, limit)
        assert all(len(part) <= limit for part in parts)
        assert all(open_fence_at_end(part) is None for part in parts)


def test_no_empty_code_block_at_a_split() -> None:
    text = "Some text before the code.\n```python\nprint('a')\nprint('b')\n```\nAfter."
    for limit in range(30, len(text)):
        for part in split_markdown(text, limit):
            assert "```python\n```" not in part
            assert part.strip() not in ("```", "```python")


def test_one_line_triple_backticks_are_inline_code_not_a_fence() -> None:
    text = "```x``` is inline code\n" + "word " * 30
    parts = split_markdown(text, 50)
    assert len(parts) > 2
    assert parts[0] == "```x``` is inline code"
    assert not any("```" in part for part in parts[1:])


def test_fence_inside_a_list_item_is_reopened_with_its_indentation() -> None:
    code = "\n".join(f"     echo {i}" for i in range(20))
    text = f"1. Install:\n     ```bash\n{code}\n     ```\n2. Done."
    parts = split_markdown(text, 120)
    assert all(len(part) <= 120 for part in parts)
    assert all(open_fence_at_end(part) is None for part in parts)
    continued = [part for part in parts if "echo" in part and "Install" not in part]
    assert continued and all(part.startswith("     ```bash\n") for part in continued)
    assert_preserved(text, parts)


def test_unclosed_fence_is_closed_only_where_split() -> None:
    text = "```python\n" + "\n".join(f"print({i})" for i in range(30))
    parts = split_markdown(text, 80)
    assert all(part.startswith("```python\n") for part in parts)
    assert all(part.endswith("\n```") for part in parts[:-1])
    assert not parts[-1].endswith("```")  # the author left it open; so does the last part
    assert_preserved(text, parts)


def test_limit_too_small_for_the_repair_still_respects_the_limit() -> None:
    text = "```" + "a-very-long-language-name" + "\n" + "code line\n" * 10 + "```"
    parts = split_markdown(text, 20)
    assert all(len(part) <= 20 for part in parts)
    assert_preserved(text, parts)


def test_discord_answer_of_5000_chars_with_code_splits_balanced() -> None:
    prose = " ".join(f"Sentence {i} explains the next step." for i in range(40))
    text = f"{prose}\n\n{code_block('python', 60)}\n\n{prose}"
    assert len(text) > 5000
    parts = render_markdown(text, DISCORD_LIMIT)
    assert len(parts) >= 3
    assert all(len(part) <= DISCORD_LIMIT for part in parts)
    assert all(open_fence_at_end(part) is None for part in parts)
    assert sum(part.startswith("```python\n") for part in parts) >= 2
    assert_preserved(text, parts)


def test_an_answer_is_sanitized_before_the_markdown_renderer_splits_it() -> None:
    assert render_markdown("a\ud800b\x00c\r\nd", DISCORD_LIMIT) == ["a\ufffdbc\nd"]
    assert render_markdown("\x00\x07", DISCORD_LIMIT) == [EMPTY_ANSWER]


# --- Properties -------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(text=any_text, limit=st.integers(min_value=1, max_value=120))
def test_any_text_splits_within_the_limit_without_loss(text: str, limit: int) -> None:
    parts = split_markdown(text, limit)
    assert all(0 < len(part) <= limit and part.strip() for part in parts)
    assert_preserved(text, parts)


@settings(max_examples=100, deadline=None)
@given(text=any_text, limit=st.integers(min_value=2, max_value=120))
def test_any_text_splits_within_a_utf16_limit(text: str, limit: int) -> None:
    parts = split_markdown(text, limit, measure=utf16_len)
    assert all(0 < utf16_len(part) <= limit and part.strip() for part in parts)
    assert_preserved(text, parts)


@settings(max_examples=80, deadline=None)
@given(text=markdownish, limit=st.integers(min_value=60, max_value=600))
def test_markdown_parts_have_balanced_fences(text: str, limit: int) -> None:
    parts = split_markdown(text, limit)
    assert all(0 < len(part) <= limit and part.strip() for part in parts)
    assert all(open_fence_at_end(part) is None for part in parts)
    assert_preserved(text, parts)


@settings(max_examples=15, deadline=None)
@given(text=st.text(st.sampled_from("ab \n`~😀"), min_size=2500, max_size=5000))
def test_long_texts_split_within_the_limit(text: str) -> None:
    parts = [part.text for part in markdown_renderer(text, DISCORD_LIMIT)]
    assert all(0 < len(part) <= DISCORD_LIMIT for part in parts)
    assert_preserved(text, parts)


@given(st.text(alphabet="`ab \n-", max_size=60))
@settings(max_examples=200, deadline=None)
def test_a_code_block_holds_any_text_as_it_is(text: str) -> None:
    """Nothing inside (backticks included: a session title may have them) closes the block early."""
    block = fences.code_block(text)
    [fence] = fences.find_fences(block)
    assert block[fence.body_start : fence.close_start] == text + "\n"
    assert fence.close_end == len(block)
