"""Images and documents in requests: validated and counted the way the providers document it.

- Anthropic (and Claude behind OpenRouter): an image costs ``width x height / 750`` tokens after the
  API's own downscale to a long edge of 1568 px; more than 8000 px on a side, more than 5 MB of base64,
  or bytes that are not the declared image type are a 400. A PDF document block costs its text plus
  about 1,600 tokens per page (each page is also seen as an image); more than 100 pages is a 400, and
  so is a request whose images and PDF pages together are more than 100 (``Too much media: ...``,
  however many earlier messages carry them).
- OpenAI: an ``image_url`` costs 85 + 170 per 512 px tile (fit in 2048 px, shortest side 768 px);
  models without vision answer 400.

Counts are pure functions of the bytes, cached by their hash (the same image is re-sent every turn).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import RequestInvalid

ANTHROPIC_MAX_EDGE = 1568
ANTHROPIC_MAX_PIXELS = 8000
ANTHROPIC_MAX_BASE64 = 5 * 1024 * 1024
MAX_PDF_PAGES = 100
MAX_MEDIA_PER_REQUEST = 100  # images + PDF pages, all messages of one request together
PDF_PAGE_TOKENS = 1_600
IMAGE_FORMATS = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}
NO_VISION_PREFIXES = ("deepseek",)
CACHE_ENTRIES = 256
V = TypeVar("V")

_sizes: dict[str, tuple[int, int]] = {}  # by sha256 of the bytes
_pdf_counts: dict[str, tuple[int, int]] = {}  # by sha256: (pages, tokens)


def _remember(cache: dict[str, V], key: str, value: V) -> V:
    if len(cache) >= CACHE_ENTRIES:
        cache.clear()
    cache[key] = value
    return value


def is_media_block(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in ("image", "document", "image_url")


def _decode(data: Any, where: str) -> bytes:
    if not isinstance(data, str):
        raise RequestInvalid(f"{where}: base64 data is required")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestInvalid(f"{where}: invalid base64 data") from None


def _image_size(digest: str, raw: bytes, media_type: str) -> tuple[int, int]:
    key = f"{digest}:{media_type}"
    if key in _sizes:
        return _sizes[key]
    from PIL import Image, UnidentifiedImageError  # loaded with the first image: a text-only run lacks it

    try:
        with Image.open(io.BytesIO(raw)) as image:
            actual = image.format
            size = image.size
    except (UnidentifiedImageError, OSError, ValueError):
        raise RequestInvalid("Could not process image") from None
    expected = IMAGE_FORMATS.get(media_type)
    if expected is None:
        raise RequestInvalid(f"Unsupported image media type: {media_type}")
    if actual != expected:
        raise RequestInvalid(
            f"The image was specified using the {media_type} media type, but the image appears to be "
            f"a {actual} image"
        )
    return _remember(_sizes, key, size)


def anthropic_image_tokens(width: int, height: int) -> int:
    scale = min(1.0, ANTHROPIC_MAX_EDGE / max(width, height))
    return max(1, math.ceil((width * scale) * (height * scale) / 750))


@dataclass(frozen=True)
class MediaCost:
    """What one image or document block costs a request: tokens, and what counts against the limit."""

    tokens: int
    images: int = 0
    pages: int = 0


def check_media_count(images: int, pages: int) -> None:
    """The request-wide limit on images and PDF pages, with the API's own message."""
    if images + pages > MAX_MEDIA_PER_REQUEST:
        raise RequestInvalid(
            f"Too much media: {pages} document pages + {images} images > {MAX_MEDIA_PER_REQUEST}"
        )


def _pdf_cost(digest: str, raw: bytes) -> tuple[int, int]:
    if digest in _pdf_counts:
        return _pdf_counts[digest]
    from pypdf import PdfReader  # loaded with the first PDF
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(raw))
        pages = len(reader.pages)
        if pages > MAX_PDF_PAGES:
            raise RequestInvalid(f"A maximum of {MAX_PDF_PAGES} PDF pages may be provided.")
        chars = sum(len(page.extract_text() or "") for page in reader.pages)
    except RequestInvalid:
        raise
    except (PyPdfError, ValueError, KeyError, OSError):
        raise RequestInvalid("The PDF specified could not be processed") from None
    return _remember(_pdf_counts, digest, (pages, math.ceil(chars / 4) + pages * PDF_PAGE_TOKENS))


def anthropic_block_cost(block: dict[str, Any], where: str) -> MediaCost:
    """What an ``image`` / ``document`` block (Anthropic's format) costs; validates it like the API."""
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise RequestInvalid(f"{where}.source: only base64 sources are emulated")
    data = source.get("data")
    if isinstance(data, str) and len(data) > ANTHROPIC_MAX_BASE64 and block["type"] == "image":
        raise RequestInvalid(
            f"{where}: image exceeds 5 MB maximum: {len(data)} bytes > {ANTHROPIC_MAX_BASE64} bytes"
        )
    raw = _decode(data, where)
    digest = hashlib.sha256(raw).hexdigest()
    media_type = str(source.get("media_type", ""))
    if block["type"] == "document":
        if media_type != "application/pdf":
            raise RequestInvalid(f"{where}.source.media_type: only application/pdf documents are emulated")
        pages, tokens = _pdf_cost(digest, raw)
        return MediaCost(tokens, pages=pages)
    width, height = _image_size(digest, raw, media_type)
    if max(width, height) > ANTHROPIC_MAX_PIXELS:
        raise RequestInvalid(
            f"{where}: image dimensions exceed max allowed size: {ANTHROPIC_MAX_PIXELS} pixels"
        )
    return MediaCost(anthropic_image_tokens(width, height), images=1)


def _data_url(part: dict[str, Any], where: str) -> tuple[str, bytes]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise RequestInvalid(f"{where}.image_url.url: only base64 data URLs are emulated")
    head, _, data = url.partition(";base64,")
    return head.removeprefix("data:"), _decode(data, where)


def openai_image_tokens(width: int, height: int) -> int:
    """OpenAI's high-detail rule: fit in 2048x2048, shortest side to 768, 170 per 512-px tile + 85."""
    fit = min(1.0, 2048 / max(width, height))
    w, h = width * fit, height * fit
    short = min(1.0, 768 / min(w, h))
    return 85 + 170 * math.ceil(w * short / 512) * math.ceil(h * short / 512)


def image_part_size(part: dict[str, Any], where: str) -> tuple[str, int, int]:
    """(sha256, width, height) of an ``image_url`` part with a data URL; validates it."""
    media_type, raw = _data_url(part, where)
    digest = hashlib.sha256(raw).hexdigest()
    width, height = _image_size(digest, raw, media_type)
    return digest, width, height


def check_vision(model: str, messages: list[Any]) -> None:
    """A 400 for image parts sent to a model without vision."""
    if not model.startswith(NO_VISION_PREFIXES):
        return
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "image_url" for p in content
        ):
            raise RequestInvalid(
                f"Invalid content type. image_url is only supported by certain models ({model})."
            )


def openai_serializable(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with each image data URL replaced by a stand-in as long as the image's tokens, so the
    character-based prefix model counts an image by its tiles and still tells two images apart."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    changed = []
    for mi, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            changed.append(message)
            continue
        parts = []
        for pi, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url":
                digest, width, height = image_part_size(part, f"messages.{mi}.content.{pi}")
                stand_in = f"<image {digest}>".ljust(openai_image_tokens(width, height) * 4, ".")
                part = {"type": "image_url", "image_url": {"url": stand_in}}
            parts.append(part)
        changed.append({**message, "content": parts})
    return {**body, "messages": changed}
