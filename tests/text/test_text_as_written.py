"""What the model wrote reaches the person as written, formatting aside, on every platform.

Arbitrary answers built from ``< > & * _ [ ] ( ) ` \\ ;``, words, HTML-looking tags, character
references, code spans, fenced code blocks, links, lists and quotes go through the gateway's render
step (``gateway.delivery.stream.render``: sanitize, then the platform's renderer, split to a limit).
For each platform the visible text is then read the way that platform shows it, by readers written
here, independent of the renderers:

- Telegram: the message text (the renderer sends text plus entities; entities only style it);
- Discord: the Markdown read by Discord's rules: code blocks and spans as their code, a backslash
  hiding itself before punctuation, and outside code its tags shown as what they name (``<#123>`` as
  ``#channel-name``, ``<@123>`` as ``@user-name``, ``<t:1700000000>`` as a date...); HTML, ``&amp;``
  and the rest of the text as written;
- Slack: mrkdwn with ``<url|label>`` shown as the label, ``&lt; &gt; &amp;`` unescaped and the
  mrkdwn style marks ``* _ ~`` not shown;
- WhatsApp: its markup with the style marks ``* _ ~`` and the code-block lines and captions not shown
  (WhatsApp has no escapes: the rest shows as written);
- Matrix: the text content of ``formatted_body`` (an HTML parser's data) and the plain ``body``;
- Signal: the message text (styles are ranges over it), without the italic caption line that names a
  code block's language above each of its parts;
- the terminal (``herald chat``): the text as printed.

"Formatting aside", precisely: whitespace is not compared (each platform lays out lines its own
way); from the model's text, only these may go missing: the characters ``* _ ` [ ] \\``, a ``>``
with only spaces, ``>`` and ``*`` before it on its line (a quote marker, perhaps in a list item), a
link's ``(destination)`` right after a ``]``, a code fence's language word, and the brackets of an
autolink to a web page, an address or a Matrix id (``<https://example.com>``, ``<me@example.com>``):
a link where the platform links it. Other angle-bracketed text (``<id:123>``, ``a < b > c``) is text
and keeps its brackets. The visible text may add only a platform's own list, rule and task-box
symbols. Everything else - letters, ``<``, ``&``, ``;``, ``(`` and ``)`` outside link destinations,
the order of it all - must arrive.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.base import Capabilities, OutboundText
from adapters.discord.adapter import DiscordAdapter
from adapters.matrix.adapter import MatrixAdapter
from adapters.matrix.formatted import to_html
from adapters.signal.adapter import SignalAdapter
from adapters.signal.settings import SignalSettings
from adapters.slack.render import render_slack
from adapters.telegram.adapter import TelegramAdapter
from adapters.text.terminal import render_terminal
from adapters.whatsapp.render import TEXT_LIMIT, render_whatsapp
from gateway.delivery.stream import render
from tests.text_support import is_fence_line

# --- The model's text ---------------------------------------------------------------------------

_WORDS = ["List", "String", "Vec", "u8", "br", "img", "src", "script", "alert", "Map", "foo", "T", "a1"]
_TAGS = [
    "<br>",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "List<String>",
    "<div>",
    "</div>",
    "<!-- note -->",
    "<b>bold</b>",
    "Map<K, V>",
]
# Discord's tags: a user, a nickname, a role, a channel, dates, custom emoji, slash commands.
_DISCORD_TAGS = [
    "<@123>",
    "<@!123>",
    "<@&123>",
    "<#123>",
    "<t:1700000000>",
    "<t:1700000000:R>",
    "<:name:123>",
    "<a:name:123>",
    "</cmd:123>",
    "</cmd sub:123>",
    "<id:browse>",
]
# CommonMark autolinks: links on a platform that links the scheme, the rest text as written.
_AUTOLINKS = ["<https://example.com/a>", "<http://example.com/b?c=d&e=f>", "<me@example.com>",
              "<id:123>", "<ftp://example.com/f>", "<matrix:u/bot:example.com>", "a < b > c"]  # fmt: skip
_REFERENCES = ["&amp;", "&lt;", "&gt;", "&#60;", "&#x3C;", "&copy;", "&nosuch;"]
_LANGUAGES = ["", "python", "html", "tsx"]

_atom = st.one_of(
    st.sampled_from(_WORDS),
    st.sampled_from(list("<>&*_[]()`\\;")),
    st.sampled_from(_TAGS),
    st.sampled_from(_DISCORD_TAGS),
    st.sampled_from(_AUTOLINKS),
    st.sampled_from(_REFERENCES),
    st.tuples(st.sampled_from(_WORDS), st.sampled_from(_WORDS)).map(
        lambda p: f"[{p[0]}](https://example.com/{p[1]})"
    ),
    st.sampled_from(_TAGS + _DISCORD_TAGS + _WORDS).map(lambda w: f"`{w}`"),
)
_line = st.lists(st.tuples(_atom, st.sampled_from(["", " ", " ", "  "])), min_size=1, max_size=12).map(
    lambda pieces: "".join(atom + gap for atom, gap in pieces).strip() or "foo"
)


@st.composite
def _fenced(draw: st.DrawFn) -> str:
    body = draw(st.lists(_line, min_size=0, max_size=4))
    return "\n".join([f"```{draw(st.sampled_from(_LANGUAGES))}", *body, "```"])


_block = st.one_of(
    _line,
    st.lists(_line, min_size=1, max_size=3).map("\n".join),
    _line.map(lambda text: "* " + text),
    _line.map(lambda text: "> " + text),
    _line.map(lambda text: "    " + text),  # an indented code block (or a list item's continuation)
    _fenced(),
)
answers = st.lists(st.tuples(_block, st.sampled_from(["\n", "\n\n"])), min_size=1, max_size=6).map(
    lambda blocks: "".join(block + gap for block, gap in blocks)
)

# --- What each platform shows -------------------------------------------------------------------


def _without_fence_lines(markdown: str) -> str:
    return "\n".join(line for line in markdown.split("\n") if not is_fence_line(line))


def telegram_visible(parts: Iterable[OutboundText]) -> str:
    return "\n".join(part.text for part in parts)


def markdown_visible(parts: Iterable[OutboundText]) -> str:
    """Markdown shown as plain text: as it is, code-fence lines aside."""
    return "\n".join(_without_fence_lines(part.text) for part in parts)


# Discord's reading, first alternative first at each position: a code block (``` anywhere, an
# optional language line), a backslash escape, a code span, a tag, any other character.
_DISCORD_READING = re.compile(
    r"```(?:[a-z0-9-]+?\n+)?\n*(?P<block>[\s\S]+?)\n*```"
    r"|\\(?P<escaped>[^0-9A-Za-z\s])"
    r"|(?P<run>`+)(?P<span>[\s\S]*?[^`])(?P=run)(?!`)"
    r"|<(?P<tag>@!?\d+|@&\d+|#\d+|t:-?\d+(?::[tTdDfFR])?|a?:\w+:\d+|/[\w-]+(?: [\w-]+){0,2}:\d+|id:[\w-]+)>"
    r"|(?P<char>[\s\S])",
    re.I,
)


def _discord_tag(tag: str) -> str:
    """What Discord shows for a tag: a name, a date or an image, never the tag as written."""
    if tag.startswith("@&"):
        return "@role-name"
    if tag.startswith("@"):
        return "@user-name"
    if tag.startswith("#"):
        return "#channel-name"
    if tag.startswith("t:"):
        return "in 3 days"
    if tag.startswith("/"):
        return tag.split(":")[0]  # the command's name, clickable
    if tag.startswith("id:"):
        return "Browse Channels"
    return "🖼"  # a custom emoji's image


def discord_visible(parts: Iterable[OutboundText]) -> str:
    """Discord's Markdown as the app shows it (see ``_DISCORD_READING``), style marks left in."""
    return "\n".join(
        "".join(
            _discord_tag(match["tag"]) if match.lastgroup == "tag" else match[match.lastgroup or "char"]
            for match in _DISCORD_READING.finditer(part.text)
        )
        for part in parts
    )


_SLACK_LINK = re.compile(r"<([^<>|]*)\|([^<>]*)>|<([^<>|]*)>")
_SLACK_ENTITY = re.compile(r"&(lt|gt|amp);")
_SLACK_MARKS = str.maketrans("", "", "*_~")


_SLACK_CAPTION = re.compile(r"^_[^\s_]+_\n(?=```)", re.M)


def slack_visible(parts: Iterable[OutboundText]) -> str:
    """mrkdwn as Slack shows it: links as their label, entities as characters, no style marks, and
    no code-block captions (the fence's language, shown again above each part of a split block)."""
    shown = []
    for part in parts:
        text = _SLACK_LINK.sub(lambda m: m.group(2) if m.group(1) is not None else m.group(3), part.text)
        text = _without_fence_lines(_SLACK_CAPTION.sub("", text)).translate(_SLACK_MARKS)
        shown.append(_SLACK_ENTITY.sub(lambda m: {"lt": "<", "gt": ">", "amp": "&"}[m.group(1)], text))
    return "\n".join(shown)


def whatsapp_visible(parts: Iterable[OutboundText]) -> str:
    """WhatsApp's markup as the app shows it: no style marks, no code-block fences or captions."""
    return "\n".join(
        _without_fence_lines(_SLACK_CAPTION.sub("", part.text)).translate(_SLACK_MARKS) for part in parts
    )


class _TextContent(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.data: list[str] = []

    def handle_data(self, data: str) -> None:
        self.data.append(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.data.append(" ")  # a <br>, a new paragraph or list item: layout, not text


def matrix_visible(parts: Iterable[OutboundText]) -> str:
    """What an HTML-capable client shows: the text content of each part's ``formatted_body``."""
    shown = []
    for part in parts:
        reader = _TextContent()
        reader.feed(to_html(part.text))
        reader.close()
        shown.append("".join(reader.data))
    return "\n".join(shown)


def matrix_body_visible(parts: Iterable[OutboundText]) -> str:
    """What a plain-text client shows: the ``body``, the Markdown as it is."""
    return markdown_visible(parts)


def signal_visible(parts: Iterable[OutboundText]) -> str:
    """Signal shows the text; an italic line right above a monospace block is the block's caption
    (its language, repeated on each part of a split block), left out like Slack's."""
    shown = []
    for part in parts:
        units = part.text.encode("utf-16-le", "surrogatepass")
        blocks = {e.offset for e in part.entities if e.type == "pre"}
        captions = [e for e in part.entities if e.type == "italic" and e.offset + e.length + 1 in blocks]
        for caption in sorted(captions, key=lambda e: -e.offset):
            units = units[: caption.offset * 2] + units[(caption.offset + caption.length) * 2 :]
        shown.append(units.decode("utf-16-le", "surrogatepass"))
    return "\n".join(shown)


def terminal_visible(parts: Iterable[OutboundText]) -> str:
    """A terminal prints the text as it is."""
    return "\n".join(part.text for part in parts)


# --- "As written, formatting aside" -------------------------------------------------------------

_MAY_VANISH = frozenset("*_`[]\\")
_QUOTE_OR_ITEM = re.compile(r"^[ \t>*]+", re.M)
_DESTINATION = re.compile(r"(?<=\])\((?:<[^<>\n]*>|[^\s()]*)\)")
_FENCE_LANGUAGE = re.compile(r"^[ \t]*```([^\s`]+)", re.M)
# An autolink whose brackets may vanish (a link where the platform links it).
_LINKED = re.compile(r"<(?:https?://[^\s<>]*|matrix:[^\s<>]*|[^\s<>@]+@[^\s<>@]+)>", re.I)


def _units(model: str) -> list[tuple[str, bool]]:
    """The model's text as (text, may vanish) units, whitespace left out."""
    spans: dict[int, int] = {}  # start -> end of the multi-character units that may vanish
    for pattern in (_DESTINATION, _FENCE_LANGUAGE):
        for match in pattern.finditer(model):
            group = match.lastindex or 0
            spans[match.start(group)] = match.end(group)
    markers = {
        match.start() + offset
        for match in _QUOTE_OR_ITEM.finditer(model)
        for offset, char in enumerate(match.group())
        if char == ">"
    } | {at for match in _LINKED.finditer(model) for at in (match.start(), match.end() - 1)}
    units: list[tuple[str, bool]] = []
    position = 0
    while position < len(model):
        if position in spans:
            end = spans[position]
            units.append(("".join(model[position:end].split()), True))
            position = end
            continue
        char = model[position]
        if not char.isspace():
            units.append((char, char in _MAY_VANISH or position in markers))
        position += 1
    return units


def as_written(model: str, visible: str, added: str = "") -> bool:
    """Whether ``visible`` is ``model`` with only formatting gone (see the module docstring), after
    leaving out whitespace and the platform's own symbols ``added``."""
    shown = "".join(char for char in visible if not char.isspace() and char not in added)
    reachable = {0}  # how much of ``shown`` the units so far can account for
    for text, may_vanish in _units(model):
        reachable = {at + len(text) for at in reachable if shown.startswith(text, at)} | (
            reachable if may_vanish else set()
        )
        if not reachable:
            return False
    return len(shown) in reachable


# --- The platforms ------------------------------------------------------------------------------

_SLACK = Capabilities(  # the adapter builds it from its settings: 4,000 characters by default
    max_message_length=4000, length_unit="chars", render=render_slack, can_edit=True, has_threads=True
)
_WHATSAPP = Capabilities(
    max_message_length=TEXT_LIMIT,
    length_unit="chars",
    render=render_whatsapp,
    can_edit=False,
    has_threads=False,
)
_TERMINAL = Capabilities(
    max_message_length=1_000_000,
    length_unit="chars",
    render=render_terminal,
    can_edit=False,
    has_threads=False,
)
PLATFORMS = {
    "telegram": (TelegramAdapter.capabilities, telegram_visible, "⦁—"),
    "discord": (DiscordAdapter.capabilities, discord_visible, ""),
    "slack": (_SLACK, slack_visible, "•"),
    "whatsapp": (_WHATSAPP, whatsapp_visible, "•"),
    "matrix": (MatrixAdapter.capabilities, matrix_visible, "☐☑"),
    "matrix body": (MatrixAdapter.capabilities, matrix_body_visible, ""),
    "signal": (SignalAdapter("+15550000001", SignalSettings()).capabilities, signal_visible, "⦁—📌"),
    "terminal": (_TERMINAL, terminal_visible, ""),
}
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("platform", PLATFORMS)
@given(model=answers, limit=st.one_of(st.none(), st.integers(200, 600)))
@EXAMPLES
def test_every_platform_shows_the_answer_as_written(platform: str, model: str, limit: int | None) -> None:
    """``limit``: the platform's own, or a small one so answers are split into several messages."""
    capabilities, visible, added = PLATFORMS[platform]
    if limit is not None:
        capabilities = dataclasses.replace(capabilities, max_message_length=limit)
    shown = visible(render(model, capabilities))
    assert as_written(model, shown, added), f"{platform} shows {shown!r}"


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize(
    "model",
    [
        "A `List<String>` or List<String>, the <br> tag and Map<K, V>.",
        "<script>alert(1)</script>",
        "Escape it: write &amp;lt; for <, &amp; for &.",
        "'<img src=x onerror=alert(1)>' is not a model name.",
        "<div>\n**inside**\n</div>\n\nafter &copy; 2026",
        "Discord writes <#123> for a channel, <@&5> for a role, <t:1700000000:R>, <:ok:7> and </ask:9>;"
        " in code `<@123>` and\n```\n\\<#123> </ask sub:9>\n```\nstay, and \\<#4> or \\\\<#4> too.",
        "Open <id:123> or <ftp://example.com/f>; a < b > c, **<id:7>** and `<https://example.com>`.",
    ],
)
def test_html_and_character_references_arrive_as_written(platform: str, model: str) -> None:
    capabilities, visible, added = PLATFORMS[platform]
    shown = visible(render(model, capabilities))
    assert as_written(model, shown, added), f"{platform} shows {shown!r}"
    for token in re.findall(r"<[^>]*>|&\w+;", model):
        assert token in shown, f"{platform} lost {token!r}: {shown!r}"


@pytest.mark.parametrize(
    ("model", "telegram", "matrix"),
    [
        ("see <https://example.com/a>", "see https://example.com/a", '<a href="https://example.com/a">'),
        ("mail <me@example.com>", "mail me@example.com", '<a href="mailto:me@example.com">'),
    ],
)
def test_an_autolink_is_a_link(model: str, telegram: str, matrix: str) -> None:
    """Telegram links a web address behind its text (an address in text it links itself); Matrix
    writes the link; neither shows the brackets, which are the link's syntax."""
    [part] = render(model, TelegramAdapter.capabilities)
    assert part.text == telegram
    links = [e for e in part.entities if e.type == "text_link"]
    assert [e.url for e in links] == (["https://example.com/a"] if "https" in model else [])
    assert matrix in to_html(model) and "&lt;" not in to_html(model)


def test_the_check_itself_catches_lost_and_added_characters() -> None:
    """The comparison is narrow: markup may vanish, nothing else."""
    assert as_written("**bold** [link](https://example.com/x) `code`", "bold link code")
    assert as_written("> quoted\n* item", "quoted\n⦁ item", added="⦁")
    assert not as_written("List<String>", "List")
    assert not as_written("the <br> tag", "the  tag")
    assert not as_written("a &amp; b", "a & b")
    assert not as_written("alert(1)", "alert1")
    assert not as_written("a b", "a b c")
    assert not as_written("a > b", "a b")  # not a quote marker: inside a line
    assert as_written("<https://example.com>", "https://example.com")  # a link's brackets
    assert not as_written("<id:123>", "id:123")  # text
