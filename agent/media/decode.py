"""Images decoded at a memory cost known before they are decoded, bounded per image and in all.

A picture's file says little about its decoded size: a 7000×7000 PNG of zeros is 190 KB and 196 MB
decoded, and Pillow's plain path (decode, turn upright, convert, scale) held three or four such
copies at once. Here an image is decoded as small as its format allows (the smallest size at least
as large as what the model is sent) and is never converted or scaled at its full size:

- JPEG: Pillow's ``draft`` decodes at 1/2, 1/4 or 1/8 of the size in libjpeg itself;
- JPEG 2000: OpenJPEG's ``reduce`` decodes only the resolution levels needed;
- PNG: a strip of rows at a time (:mod:`agent.media.png_strips`), each strip reduced before the next
  is read;
- the rest (GIF, WebP, BMP, TIFF, PPM, interlaced PNG; an icon, small, decodes as it is opened)
  decode whole, then are reduced a strip at a time from the decoded image.

What each way costs is estimated from the header (:func:`plan_decode`; the constants were measured,
see docs/benchmarks.md), so the caller can reserve it from the process's
:class:`~agent.media.memory.DecodeBudget` first, or refuse an image that alone would need more.

The work is CPU-bound and blocking: run it in a thread.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from PIL import ExifTags, Image, ImageFile, ImageOps

from agent.media.png_strips import SAMPLES, SIGNATURE, png_layout, png_strips

MB = 1_000_000
STRIP_BYTES = 4 * MB  # a strip's pixels, as 4-byte pixels: what is reduced at a time
PIXEL_BYTES = 4  # what Pillow stores per pixel in the widest mode (RGB is stored as RGBX)
COPIES = 3  # a strip: decoded, converted, reduced; the reduced image: assembled, upright, scaled
# What a format's decoder holds besides Pillow's image, in bytes per pixel: measured (peak RSS of one
# 7000×7000 decode, docs/benchmarks.md) and rounded up. WebP decodes into two canvases of its own and
# hands a copy over; OpenJPEG keeps 32 bits a sample; libtiff a strip, which may be the whole image;
# Pillow's RLE bitmap decoder builds the pixels twice.
DECODER_BYTES = {"WEBP": 12, "JPEG2000": 16, "TIFF": 8, "BMP": 2}
COEFFICIENT_BYTES = 2  # a progressive JPEG keeps every coefficient of the full size (16 bits each)

Route = Literal["JPEG draft", "JPEG 2000 reduce", "PNG strips", "whole"]


@dataclass(frozen=True)
class DecodePlan:
    """How one image is decoded: the way, the size it ends at (``target``: within the edge, the aspect
    kept), the factor its decoder divides the size by itself (``scale``), and the estimated peak bytes.
    After decoding, the image is reduced by the largest integer factor that keeps it at least as large
    as ``target`` (a box filter, as Pillow's ``thumbnail`` reduces before it resamples)."""

    route: Route
    target: tuple[int, int]
    scale: int
    cost: int


def plan_decode(image: ImageFile.ImageFile, data: bytes, max_edge: int) -> DecodePlan:
    """How to decode ``image`` (opened, not loaded; ``data`` its file) to be scaled to at most
    ``max_edge`` pixels on its longer side, and what that costs at most."""
    size = image.size
    target = _target(size, max_edge)
    factor = _factor(size, target)
    if image.format == "JPEG":
        scale = next((s for s in (8, 4, 2) if s <= factor), 1)
        decoded = _divided(size, scale)
        cost = _progressive_cost(image) + _reduce_cost(decoded, target)
        return DecodePlan("JPEG draft", target, scale, cost)
    if image.format == "JPEG2000":  # OpenJPEG refuses more halvings than the file has levels
        scale = 1 << min(factor.bit_length() - 1, _decomposition_levels(data))
        decoded = _divided(size, scale)
        cost = _whole_cost(image, decoded) + _reduce_cost(decoded, target)
        return DecodePlan("JPEG 2000 reduce", target, scale, cost)
    if image.format == "PNG" and not _interlaced(data):  # a strip's rows: inflated, stored, in a PNG, decoded
        return DecodePlan("PNG strips", target, 1, _reduce_cost(size, target, 5 * _png_pixel_bytes(data)))
    cost = _whole_cost(image, size) + _reduce_cost(size, target)
    return DecodePlan("whole", target, 1, cost)


def decode_reduced(image: ImageFile.ImageFile, data: bytes, plan: DecodePlan, mode: str) -> Image.Image:
    """``image`` decoded as ``plan`` says and reduced, in ``mode`` (RGB or RGBA), upright as its EXIF
    orientation says. Closes ``image`` (which frees its decoded pixels)."""
    orientation = _orientation(image, data)
    try:
        if plan.route == "PNG strips":
            factor = _factor(image.size, plan.target)
            strips = png_strips(png_layout(data), _strip_rows(image.size[0], factor))
            reduced = _assembled(strips, image.size, factor, mode)
        else:
            if plan.route == "JPEG draft":
                image.draft(None, plan.target)
            elif plan.route == "JPEG 2000 reduce":
                image.reduce = plan.scale.bit_length() - 1  # type: ignore[assignment]
            image.load()
            factor = _factor(image.size, plan.target)
            rows = _strip_rows(image.size[0], factor)
            reduced = _assembled(_crops(image, rows), image.size, factor, mode)
    finally:
        image.close()
    if orientation != 1:
        reduced.getexif()[ExifTags.Base.Orientation] = orientation
        ImageOps.exif_transpose(reduced, in_place=True)
    return reduced


def _target(size: tuple[int, int], max_edge: int) -> tuple[int, int]:
    """The size an image ends at: within ``max_edge`` × ``max_edge``, its aspect kept, never enlarged."""
    width, height = size
    scale = max(width, height) / max_edge
    if scale <= 1:
        return size
    return (max(1, round(width / scale)), max(1, round(height / scale)))


def _factor(size: tuple[int, int], target: tuple[int, int]) -> int:
    """The largest integer reduction that leaves ``size`` at least as large as ``target``."""
    return max(1, min(size[0] // target[0], size[1] // target[1]))


def _divided(size: tuple[int, int], scale: int) -> tuple[int, int]:
    return (-(-size[0] // scale), -(-size[1] // scale))


def _strip_rows(width: int, factor: int) -> int:
    """Rows of a strip: about :data:`STRIP_BYTES`, and a multiple of the factor, so that reducing
    strip by strip gives what reducing the whole would."""
    return max(1, STRIP_BYTES // (PIXEL_BYTES * width * factor)) * factor


def _reduce_cost(size: tuple[int, int], target: tuple[int, int], raw_pixel_bytes: float = 0) -> int:
    """Peak bytes of reducing strip by strip: a strip in its copies (and ``raw_pixel_bytes`` a pixel of
    the file's own rows, for a PNG decoded a strip at a time) and the reduced image in its copies."""
    factor = _factor(size, target)
    strip = min(_strip_rows(size[0], factor), size[1]) * size[0]
    reduced = _divided(size, factor)
    pixels = (strip + reduced[0] * reduced[1]) * PIXEL_BYTES * COPIES
    return pixels + int(strip * raw_pixel_bytes)


def _progressive_cost(image: ImageFile.ImageFile) -> int:
    """A progressive JPEG's coefficient buffers: libjpeg keeps every coefficient of the full size, to
    refine them pass after pass, whatever size it decodes to (colour planes may be subsampled)."""
    if not image.info.get("progressive") and not image.info.get("progression"):
        return 0
    layers: list[tuple[str, int, int, int]] = getattr(image, "layer", [])  # (id, h, v, table) a plane
    most = max((h * v for _, h, v, _ in layers), default=1)
    samples = sum(h * v for _, h, v, _ in layers) / most if layers else len(image.getbands())
    return int(image.size[0] * image.size[1] * samples * COEFFICIENT_BYTES)


def _whole_cost(image: ImageFile.ImageFile, size: tuple[int, int]) -> int:
    """Pillow's decoded image at ``size`` (one byte a pixel for a palette or grey image) and what the
    format's decoder holds besides it."""
    pixel = 1 if image.mode in ("1", "L", "P") else PIXEL_BYTES
    return size[0] * size[1] * (pixel + DECODER_BYTES.get(image.format or "", 0))


def _png_pixel_bytes(data: bytes) -> float:
    """Bytes a pixel takes in a PNG's rows, from its header (up to 8: 16-bit RGBA)."""
    depth, color_type = data[24], data[25]
    return depth * SAMPLES.get(color_type, 4) / 8


def _decomposition_levels(data: bytes) -> int:
    """The wavelet decomposition levels of a JPEG 2000 codestream's default coding style (its COD
    marker), 0 when the main header cannot be read (the image is then decoded at full size)."""
    start = data.find(b"\xff\x4f\xff\x51")  # start of codestream, then the image and tile size
    position = start + 2 if start >= 0 else len(data)
    while position + 4 <= len(data):
        marker, length = struct.unpack_from(">HH", data, position)
        if marker == 0xFF52 and position + 9 < len(data):  # COD: Scod, order, layers (2), MCT, levels
            return data[position + 9]
        if marker == 0xFF90 or marker < 0xFF00:  # the first tile: the main header is over
            break
        position += 2 + length
    return 0


def _interlaced(data: bytes) -> bool:
    return data[:8] == SIGNATURE and len(data) > 28 and data[28] == 1  # IHDR's interlace method


def _orientation(image: ImageFile.ImageFile, data: bytes) -> int:
    """The EXIF (or XMP) orientation, read without decoding: Pillow's PNG reads an ``eXIf`` chunk that
    may follow the pixels by decoding the whole image first, so the chunk is handed to it here."""
    if image.format == "PNG" and "exif" not in image.info:
        image.info["exif"] = _png_exif(data)
    orientation = image.getexif().get(ExifTags.Base.Orientation, 1)
    return orientation if isinstance(orientation, int) else 1


def _png_exif(data: bytes) -> bytes:
    with contextlib.suppress(OSError, struct.error):
        return png_layout(data).exif or b""
    return b""


def _crops(image: Image.Image, rows: int) -> Iterator[Image.Image]:
    width, height = image.size
    for top in range(0, height, rows):
        yield image.crop((0, top, width, min(height, top + rows)))


def _assembled(strips: Iterable[Image.Image], size: tuple[int, int], factor: int, mode: str) -> Image.Image:
    """The strips of an image of ``size`` (each a multiple of ``factor`` high, but the last) converted
    to ``mode`` and reduced, one under the other: the whole image reduced, never the whole converted."""
    out = Image.new(mode, _divided(size, factor))
    top = 0
    for strip in strips:
        part = _eight_bit(strip).convert(mode)
        if factor > 1:
            part = part.reduce(factor)
        out.paste(part, (0, top))
        top += part.height
    return out


def _eight_bit(image: Image.Image) -> Image.Image:
    """16-bit grey scaled to 8 bits (Pillow's ``convert`` would clip it: nearly every pixel white)."""
    if image.mode.startswith("I;16"):
        return image.convert("I").point(lambda value: value / 256).convert("L")
    return image

