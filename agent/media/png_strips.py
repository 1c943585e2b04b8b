"""A PNG decoded a strip of rows at a time, so a large image never lies whole in memory.

Pillow decodes a PNG into one full-size image: a 7000×7000 PNG of zeros is a 190 KB file and
196 MB decoded. Here the image's compressed rows are inflated a strip at a time (the inflater is
told how much to give, so a small file cannot expand beyond one strip), and each strip is handed to
Pillow as a PNG of its own: the same header with the strip's height, the same palette and
transparency chunks, and the strip's rows as they were, still filtered. A PNG row may be filtered
against the row above it, so each strip starts with one extra row: the unfiltered last row of the
previous strip (zeros for the first, as the format defines), stored without a filter. Pillow then
does all the unfiltering, unpacking and palette work as it does for a whole file, and every pixel
comes out as it would from ``Image.open(data).load()`` (tests compare them for every PNG type).

The seed row must be the previous row's raw bytes. Pillow hands back 8-bit and 16-bit grey rows as
they were; for 16-bit colour it keeps only each sample's high byte, which is enough, because PNG
filters work byte by byte (a high byte never depends on a low byte), so low bytes of zero leave every
high byte right. Rows of fewer than 8 bits per pixel are read a second time as plain bytes.

Interlaced PNGs (Adam7) spread every pass over the whole image and cannot be cut into strips; the
caller decodes those whole (:func:`png_layout` says which).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from PIL import Image

SIGNATURE = b"\x89PNG\r\n\x1a\n"
SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples per pixel by colour type
KEPT = (b"PLTE", b"tRNS")  # the chunks besides the header that change what the pixels decode to
FEED = 65_536  # compressed bytes given to the inflater at a time


@dataclass(frozen=True)
class PngLayout:
    """What the strips need from a PNG's chunks."""

    width: int
    height: int
    depth: int
    color_type: int
    interlaced: bool
    kept: bytes  # the PLTE and tRNS chunks, as they were
    data: tuple[memoryview, ...]  # the IDAT payloads, in order
    exif: bytes | None  # an eXIf chunk, which may come after the pixels, where Pillow reads it late

    @property
    def row_bytes(self) -> int:
        return (self.width * self.depth * SAMPLES[self.color_type] + 7) // 8


def png_layout(data: bytes) -> PngLayout:
    """The chunks of a PNG that Pillow already opened (so its header is known good); raises
    :class:`OSError` for a chunk that runs past the end of the file."""
    view = memoryview(data)
    position = len(SIGNATURE)
    header: tuple[int, ...] | None = None
    kept: list[bytes] = []
    payloads: list[memoryview] = []
    exif: bytes | None = None
    while position + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, position)
        start, end = position + 8, position + 8 + length
        if end + 4 > len(data):
            if kind == b"IDAT" and payloads:  # Pillow reads a last IDAT cut short, so do we
                payloads.append(view[start:end])
                break
            raise OSError(f"the PNG's {kind.decode('latin-1')!r} chunk runs past the end of the file")
        if kind == b"IHDR":
            header = struct.unpack_from(">IIBBBBB", data, start)
        elif kind in KEPT:
            kept.append(bytes(view[position : end + 4]))
        elif kind == b"IDAT":
            payloads.append(view[start:end])
        elif kind == b"eXIf":
            exif = bytes(view[start:end])
        elif kind == b"IEND":
            break
        position = end + 4
    if header is None or not payloads:
        raise OSError("the PNG has no image data")
    width, height, depth, color_type, _, _, interlace = header
    if color_type not in SAMPLES:
        raise OSError(f"the PNG's colour type {color_type} is not one PNG defines")
    return PngLayout(width, height, depth, color_type, interlace == 1, b"".join(kept), tuple(payloads), exif)


def png_strips(layout: PngLayout, rows: int) -> Iterator[Image.Image]:
    """The image as strips of ``rows`` rows (the last may be shorter), top to bottom, each in the mode
    and with the palette and transparency Pillow gives the whole image. Not for an interlaced PNG."""
    assert not layout.interlaced and rows > 0
    inflater = _Rows(layout)
    seed = bytes(layout.row_bytes)  # the row above the first one is zeros
    for top in range(0, layout.height, rows):
        count = min(rows, layout.height - top)
        payload = zlib.compress(b"\x00" + seed + inflater.take(count), 0)  # stored: no work, a copy
        strip = _decoded(_png(layout, layout.width, count + 1, layout.depth, layout.color_type, payload))
        seed = _last_row(layout, strip, payload, count)
        yield strip.crop((0, 1, layout.width, count + 1))


class _Rows:
    """The filtered rows (a filter byte, then ``row_bytes``) of the IDAT stream, a strip at a time."""

    def __init__(self, layout: PngLayout) -> None:
        self._size = layout.row_bytes + 1
        self._input = (p[i : i + FEED] for p in layout.data for i in range(0, len(p), FEED))
        self._inflater = zlib.decompressobj()
        self._left = b""  # input the inflater was given but did not take yet

    def take(self, count: int) -> bytes:
        """The next ``count`` rows; :class:`OSError` when the data ends before them."""
        wanted = count * self._size
        parts: list[bytes] = []
        got = 0
        try:
            while got < wanted:
                if not self._left:
                    piece = next(self._input, None)
                    if piece is None or self._inflater.eof:
                        raise OSError("image file is truncated")
                    self._left = bytes(piece)
                part = self._inflater.decompress(self._left, wanted - got)
                self._left = self._inflater.unconsumed_tail
                if not part and self._inflater.eof:
                    raise OSError("image file is truncated")
                parts.append(part)
                got += len(part)
        except zlib.error as error:
            raise OSError(f"the PNG's image data is damaged ({error})") from None
        return b"".join(parts)


def _png(layout: PngLayout, width: int, height: int, depth: int, color_type: int, payload: bytes) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    kept = layout.kept if color_type == layout.color_type else b""
    return SIGNATURE + _chunk(b"IHDR", header) + kept + _chunk(b"IDAT", payload) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _decoded(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png), formats=("PNG",))
    image.load()
    return image


def _last_row(layout: PngLayout, strip: Image.Image, payload: bytes, count: int) -> bytes:
    """The raw (unfiltered) bytes of the strip's last row: the next strip's seed."""
    if layout.depth < 8:  # packed pixels: read the strip again as plain bytes, one grey byte each
        raw = _decoded(_png(layout, layout.row_bytes, count + 1, 8, 0, payload))
        return raw.crop((0, count, layout.row_bytes, count + 1)).tobytes()
    row = strip.crop((0, count, layout.width, count + 1))
    if layout.depth == 8:
        return row.tobytes()
    if layout.color_type == 0:  # 16-bit grey: Pillow keeps both bytes
        return row.tobytes("raw", "I;16B")
    high = row.tobytes()  # RGB or RGBA: each sample's high byte
    if layout.color_type == 4:  # grey and alpha, which Pillow opened as RGBA (L, L, L, A)
        pairs = bytearray(len(high) // 2)
        pairs[0::2], pairs[1::2] = high[0::4], high[3::4]
        high = bytes(pairs)
    seed = bytearray(2 * len(high))
    seed[0::2] = high
    return bytes(seed)
