"""What a message carries besides its text: images and documents, content-addressed.

A :class:`Media` is stored once (by its SHA-256) with the message that carried it and loaded with the
history, so every later request of the session sends exactly the same bytes and the provider's cache
reads the file as part of the history's prefix (docs/ARCHITECTURE.md, "Media and tools"). Only prepared
files become ``Media``: an image already scaled and re-encoded, a PDF already checked.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

MediaKind = Literal["image", "document"]


@dataclass(frozen=True)
class Media:
    """One prepared file. ``data`` is the exact bytes the model gets; ``tokens`` estimates its cost
    (the providers count images by their pixels and PDFs by their pages, not by their bytes)."""

    sha256: str
    kind: MediaKind
    media_type: str  # image/jpeg, image/png, application/pdf, ...
    name: str | None
    tokens: int
    data: bytes = field(repr=False, compare=False)
    width: int | None = None
    height: int | None = None
    pages: int | None = None

    @classmethod
    def of(
        cls, kind: MediaKind, media_type: str, data: bytes, *, name: str | None, tokens: int, **dims: Any
    ) -> Media:
        return cls(hashlib.sha256(data).hexdigest(), kind, media_type, name, tokens, data, **dims)

    @cached_property
    def base64(self) -> str:
        """The data as base64 text, computed once per loaded file (it is sent on every request)."""
        return base64.b64encode(self.data).decode("ascii")

    def ref(self) -> dict[str, Any]:
        """What the message row stores about this file (the bytes live once in the media table)."""
        ref: dict[str, Any] = {
            "sha256": self.sha256,
            "kind": self.kind,
            "media_type": self.media_type,
            "name": self.name,
            "tokens": self.tokens,
        }
        for key in ("width", "height", "pages"):
            if getattr(self, key) is not None:
                ref[key] = getattr(self, key)
        return ref

    @classmethod
    def from_ref(cls, ref: dict[str, Any], data: bytes) -> Media:
        return cls(
            sha256=ref["sha256"],
            kind=ref["kind"],
            media_type=ref["media_type"],
            name=ref.get("name"),
            tokens=int(ref.get("tokens", 0)),
            data=data,
            width=ref.get("width"),
            height=ref.get("height"),
            pages=ref.get("pages"),
        )

    def label(self) -> str:
        """How the file is named in text (a transcript for a summary model, a search result)."""
        what = "image" if self.kind == "image" else "document"
        detail = f"{self.pages} pages" if self.pages else None
        parts = [p for p in (self.name, detail) if p]
        return f"[{what}: {', '.join(parts)}]" if parts else f"[{what}]"
