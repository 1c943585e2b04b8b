"""Media in provider wire fragments: stored with a placeholder, sent with the bytes.

A message's wire fragment is stored as it was sent (cache invariant 4), but a photo's base64 in every
stored fragment would copy the file into the messages table once per message and bloat every history
load. So the stored fragment holds ``herald-media:<sha256>`` where the base64 goes, and
:func:`hydrate` puts the file's bytes (loaded with the message, content-addressed) back right before
the request is sent: the bytes on the wire are the same on every request, after a restart too.

Only the places a file can be are filled in (an image or document block's ``source.data``, an
``image_url``'s ``url``), and only with files of the message itself, so text that happens to contain
the placeholder stays text. A file whose bytes are gone from the store (a damaged or hand-edited
database) becomes a text block saying so: a placeholder sent as base64 would make every request of the
session fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.media import Media

PLACEHOLDER = "herald-media:"


def placeholder(media: Media) -> str:
    return PLACEHOLDER + media.sha256


def anthropic_block(media: Media) -> dict[str, Any]:
    """An Anthropic ``image`` or ``document`` block for ``media`` (with the placeholder as data)."""
    source = {"type": "base64", "media_type": media.media_type, "data": placeholder(media)}
    if media.kind == "image":
        return {"type": "image", "source": source}
    block: dict[str, Any] = {"type": "document", "source": source}
    if media.name:
        block["title"] = media.name
    return block


def openai_part(media: Media) -> dict[str, Any]:
    """A Chat Completions content part for ``media``: an image as a data URL; a document (Herald sends
    only the text of PDFs to these models, so one here is a file the model cannot read) as a line."""
    if media.kind == "image":
        return {
            "type": "image_url",
            "image_url": {"url": f"data:{media.media_type};base64,{placeholder(media)}"},
        }
    return {"type": "text", "text": f"{media.label()} (this model cannot read it)"}


def hydrate(fragment: dict[str, Any], media: Mapping[str, Media]) -> dict[str, Any]:
    """``fragment`` with the files' base64 in place of their placeholders (a new dict; the stored one is
    never changed). A block whose file is not in ``media`` becomes a text block naming the lost file."""
    content = fragment.get("content")
    if not isinstance(content, list):
        return fragment
    blocks = [_hydrate_block(block, media) for block in content]
    if all(new is old for new, old in zip(blocks, content, strict=True)):
        return fragment  # no file in it: nothing to copy
    return {**fragment, "content": blocks}


def _hydrate_block(block: Any, media: Mapping[str, Media]) -> Any:
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind in ("image", "document"):
        source = block.get("source")
        data = source.get("data") if isinstance(source, dict) else None
        if isinstance(source, dict) and _is_placeholder(data):
            found = media.get(str(data).removeprefix(PLACEHOLDER))
            if found is None:
                return _lost(kind, block.get("title"))
            return {**block, "source": {**source, "data": found.base64}}
    elif kind == "image_url":
        image = block.get("image_url")
        if isinstance(image, dict):
            url = image.get("url")
            head, sep, tail = url.partition(";base64,") if isinstance(url, str) else ("", "", "")
            if sep and _is_placeholder(tail):
                found = media.get(tail.removeprefix(PLACEHOLDER))
                if found is None:
                    return _lost("image", None)
                return {**block, "image_url": {**image, "url": f"{head};base64,{found.base64}"}}
    return block


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PLACEHOLDER)


def _lost(kind: str, title: Any) -> dict[str, Any]:
    """What the model reads where a file was whose bytes are gone: the same words on every request."""
    what = f"{kind} {title}" if isinstance(title, str) and title else kind
    return {"type": "text", "text": f"[{what}: no longer available, its stored file is missing]"}
