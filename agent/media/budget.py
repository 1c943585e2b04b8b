"""What a conversation's files cost every request, and the limits a new file is checked against.

A file stays in the conversation and is re-sent with every later request (docs/ARCHITECTURE.md, "Media and
tools"), so checking each file alone is not enough: a provider takes a bounded number of images and
PDF pages per request (Anthropic: 100 in all), and files take context-window tokens on every turn. A
file that would take the conversation over either limit must be refused when it arrives: once stored,
it would make every later request of the session fail until the files leave it (``/new``, or
``/compress`` summarizing the messages that carry them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.media.errors import MediaRefused
from agent.model.media import Media

FRESH_START = (
    "Send /new to start a fresh conversation (or /compress to summarize the older messages: their "
    "files leave with them), then send it again."
)


@dataclass(frozen=True)
class MediaLoad:
    """Files as a request carries them: images, native PDF pages, and their estimated tokens."""

    images: int = 0
    pages: int = 0
    tokens: int = 0

    @property
    def items(self) -> int:
        """What the providers count against their per-request limit: each image and each PDF page."""
        return self.images + self.pages

    def __add__(self, other: MediaLoad) -> MediaLoad:
        return MediaLoad(self.images + other.images, self.pages + other.pages, self.tokens + other.tokens)

    @classmethod
    def of_refs(cls, refs: Iterable[Mapping[str, Any]]) -> MediaLoad:
        """The load of stored file references (``Media.ref()``)."""
        images = pages = tokens = 0
        for ref in refs:
            if ref.get("kind") == "image":
                images += 1
            else:
                pages += int(ref.get("pages") or 1)
            tokens += int(ref.get("tokens") or 0)
        return cls(images, pages, tokens)

    @classmethod
    def of(cls, files: Iterable[Media]) -> MediaLoad:
        return cls.of_refs(file.ref() for file in files)

    def describe(self) -> str:
        """``3 images and 60 PDF pages``."""
        parts = []
        if self.images:
            parts.append(f"{self.images:,} image{'s' if self.images != 1 else ''}")
        if self.pages:
            parts.append(f"{self.pages:,} PDF page{'s' if self.pages != 1 else ''}")
        return " and ".join(parts) or "no files"


@dataclass(frozen=True)
class MediaLimits:
    """What one request may carry for one session's model."""

    max_items: int  # images plus PDF pages (media.files_max_per_request)
    max_tokens: int  # estimated tokens of all files (media.files_max_context_share of the window)
    model: str
    context_length: int


def check_load(new: MediaLoad, held: MediaLoad, limits: MediaLimits, *, what: str) -> None:
    """Raise :class:`MediaRefused` when ``new`` (the files of one message, named ``what``) is over a
    limit alone, or together with ``held`` (the files already in the conversation)."""
    window = f"{limits.model}'s {limits.context_length:,}-token context window"
    if new.tokens > limits.max_tokens:
        raise MediaRefused(
            f"{what} would take about {new.tokens:,} tokens; files may take at most {limits.max_tokens:,} "
            f"of {window} (media.files_max_context_share). Send the pages that matter."
        )
    if new.items > limits.max_items:
        raise MediaRefused(
            f"{what} {'is' if new.items == 1 else 'are'} {new.describe()}; one request can carry at most "
            f"{limits.max_items:,} images and PDF pages in all (media.files_max_per_request)."
        )
    total = new + held
    if total.items > limits.max_items:
        raise MediaRefused(
            f"This conversation already carries {held.describe()}, sent again with every message; with "
            f"{what} it would be {total.items:,}, over the {limits.max_items:,} images and PDF pages one "
            f"request can carry (media.files_max_per_request). {FRESH_START}"
        )
    if total.tokens > limits.max_tokens:
        raise MediaRefused(
            f"The files in this conversation already take about {held.tokens:,} tokens of every message; "
            f"with {what} they would take {total.tokens:,}, over the {limits.max_tokens:,} files may take "
            f"of {window} (media.files_max_context_share). {FRESH_START}"
        )
