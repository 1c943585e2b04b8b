"""Markdown to Matrix HTML (``adapters.matrix.formatted``): only allowed tags, raw HTML shown as text,
unsafe links dropped, every word kept. Pure: no homeserver needed."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from adapters.matrix.formatted import ALLOWED_TAGS, to_html


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.words: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.words.append(data)


def parsed(markdown: str) -> Tags:
    tags = Tags()
    tags.feed(to_html(markdown))
    tags.close()
    return tags


SAMPLES = [
    "**bold** and *italic* and ~~gone~~ and `code`",
    "# Title\n\n## Sub\n\n> quoted\n\n1. one\n2. two\n\n- a\n- [x] done",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "```python\nif a < b and c > d:\n    print('&')\n```",
    "<script>alert(1)</script> <img src=x onerror=alert(1)> <b>not bold</b>",
    "[ok](https://example.org/?a=1&b=2) [bad](javascript:alert(1)) ![pic](http://x/y.png)",
    "line one\nline two  \nline three\n\n---\n\nafter the rule",
]


@pytest.mark.parametrize("markdown", SAMPLES)
def test_only_allowed_tags_and_safe_links_come_out(markdown: str) -> None:
    tags = parsed(markdown)
    assert {tag for tag, _ in tags.tags} <= ALLOWED_TAGS
    for tag, attributes in tags.tags:
        assert set(attributes) <= ({"href"} if tag == "a" else {"class"} if tag == "code" else {"start"})
        assert (attributes.get("href") or "https:").startswith(("https:", "http:"))


def test_raw_html_in_the_answer_is_shown_as_text_not_markup() -> None:
    tags = parsed(SAMPLES[4])
    assert tags.tags == [("p", {})]  # an HTML block: a paragraph of its text
    assert "".join(tags.words) == "<script>alert(1)</script> <img src=x onerror=alert(1)> <b>not bold</b>"


def test_a_code_block_keeps_its_language_and_its_text() -> None:
    html = to_html(SAMPLES[3])
    assert html.startswith('<pre><code class="language-python">')
    assert "".join(parsed(SAMPLES[3]).words) == "if a < b and c > d:\n    print('&')\n"


def test_an_unsafe_link_keeps_its_words_but_not_its_target_and_an_image_becomes_a_link() -> None:
    tags = parsed(SAMPLES[5])
    assert [attributes["href"] for tag, attributes in tags.tags if tag == "a"] == [
        "https://example.org/?a=1&b=2", "http://x/y.png"]  # fmt: skip
    assert "".join(tags.words) == "ok bad pic"


def test_line_breaks_are_kept_and_blank_text_gives_nothing() -> None:
    assert to_html("line one\nline two") == "<p>line one<br>line two</p>"
    assert to_html("") == "" and to_html("  \n ") == ""
