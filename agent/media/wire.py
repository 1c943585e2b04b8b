"""Media in provider wire fragments: stored with a placeholder, sent with the bytes.

A message's wire fragment is stored as it was sent (cache invariant 4), but a photo's base64 in every
stored fragment would copy the file into the messages table once per message and bloat every history
load. So the stored fragment holds ``herald-media:<sha256>`` where the base64 goes, and
:func:`hydrate` puts the file's bytes (loaded with the message, content-addressed) back right before
the request is sent: the bytes on the wire are the same on every request, after a restart too.

Only the places a file can be are filled in (an image or document block's ``source.data``, an
``image_url``'s ``url``), and only with files of the message itself, so text that happens to contain
the placeholder stays text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.media.types import Media

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
    never changed). A placeholder whose file is not in ``media`` is left as is."""
    content = fragment.get("content")
    if not isinstance(content, list):
        return fragment
    return {**fragment, "content": [_hydrate_block(block, media) for block in content]}


def _hydrate_block(block: Any, media: Mapping[str, Media]) -> Any:
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind in ("image", "document"):
        source = block.get("source")
        if isinstance(source, dict):
            found = _lookup(source.get("data"), media)
            if found is not None:
                return {**block, "source": {**source, "data": found.base64}}
    elif kind == "image_url":
        image = block.get("image_url")
        if isinstance(image, dict):
            url = image.get("url")
            head, sep, tail = url.partition(";base64,") if isinstance(url, str) else ("", "", "")
            found = _lookup(tail, media) if sep else None
            if found is not None:
                return {**block, "image_url": {**image, "url": f"{head};base64,{found.base64}"}}
    return block


def _lookup(value: Any, media: Mapping[str, Media]) -> Media | None:
    if isinstance(value, str) and value.startswith(PLACEHOLDER):
        return media.get(value.removeprefix(PLACEHOLDER))
    return None
