"""Files people send, made in the test: photos (with EXIF), transparent PNGs, PDFs with text, voice notes.

Everything is generated (nothing binary is committed) and deterministic for the same arguments.
"""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

GPS_TAG = 0x8825  # GPSInfo: where a phone photo was taken


def photo(width: int = 4000, height: int = 3000, *, color: tuple[int, int, int] = (30, 120, 200)) -> bytes:
    """A JPEG as a phone takes it: large, with a GPS position in its EXIF data."""
    image = Image.new("RGB", (width, height), color)
    for x in range(0, width, max(1, width // 16)):  # some structure, so it is not one flat colour
        image.paste((255, 255, 255), (x, 0, x + 4, height))
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif[GPS_TAG] = {1: "N", 2: (52.0, 31.0, 12.0), 3: "E", 4: (13.0, 24.0, 36.0)}
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, exif=exif)
    return buffer.getvalue()


def transparent_png(width: int = 600, height: int = 400) -> bytes:
    image = Image.new("RGBA", (width, height), (255, 0, 0, 0))
    image.paste((0, 200, 0, 255), (50, 50, 250, 250))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def image_file(image_format: str, width: int = 320, height: int = 240) -> bytes:
    """A picture in ``image_format`` (a Pillow format name: BMP, TIFF, ...), as a scanner or an old
    program saves it."""
    image = Image.new("RGB", (width, height), (200, 60, 30))
    image.paste((255, 255, 255), (0, 0, width // 2, height // 2))
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return buffer.getvalue()


def huge_png_header(width: int = 30_000, height: int = 30_000) -> bytes:
    """A tiny file claiming enormous dimensions: a decompression bomb's header."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def corrupt_jpeg() -> bytes:
    return photo(200, 100)[:300]  # the header, then nothing


def pdf(pages: int = 2, text: str | None = "Quarterly report: revenue grew 12 percent.") -> bytes:
    """A real PDF with ``pages`` pages, each showing ``text`` and its page number (a text layer); with
    ``text`` None, pages with a drawing and no text at all, as a scanner makes them."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_id = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for number in range(1, pages + 1):
        if text is None:
            stream = b"0.5 g 72 72 468 648 re f"  # a grey rectangle: a page image, no text
        else:
            line = f"{text} Page {number}.".replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            stream = f"BT /F1 12 Tf 72 720 Td ({line}) Tj ET".encode("latin-1")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_id, content, font)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id
    refs = b" ".join(b"%d 0 R" % kid for kid in kids)
    objects[pages_id - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        xref,
    )
    return bytes(out)


def voice_note(words: str, seconds: float = 0.0) -> bytes:
    """An Ogg file whose words the provider emulator reads back (it does not listen: ``SPEECH:``); with
    ``seconds``, padded to the size that much speech takes at 32 kbit/s (the emulator bills by size)."""
    note = b"OggS\x00\x02" + b"\x00" * 20 + b"SPEECH:" + words.encode() + b"\x00"
    return note + b"\x00" * max(0, int(seconds * 4_000) - len(note))


PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples a pixel, by colour type
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def png_file(
    width: int,
    height: int,
    *,
    depth: int = 8,
    color_type: int = 6,
    pixels: bytes | None = None,
    extra: tuple[tuple[bytes, bytes], ...] = (),
    interlaced: bool = False,
    idat_size: int = 1000,
) -> bytes:
    """A PNG written byte by byte, in any of the format's pixel layouts (Pillow writes 8-bit ones only,
    and chooses its own filters): ``pixels`` are the raw rows (zeros when None), row *n* is filtered
    with filter *n* mod 5 (none, sub, up, average, Paeth), the data is split over IDAT chunks of
    ``idat_size`` bytes, and ``extra`` chunks (PLTE, tRNS, eXIf...) come before them."""
    bits = depth * PNG_SAMPLES[color_type]
    row_bytes = (width * bits + 7) // 8
    step = max(1, bits // 8)  # the byte distance a filter looks back
    if pixels is None:
        rows = [bytes(row_bytes)] * height
    else:
        assert len(pixels) == row_bytes * height
        rows = [pixels[y * row_bytes : (y + 1) * row_bytes] for y in range(height)]
    passes = [rows]
    if interlaced:
        assert bits >= 8, "interlacing is written for whole-byte pixels only"
        passes = [
            [
                bytes(len(range(x0, width, dx)) * step)
                if pixels is None
                else b"".join(row[x * step : (x + 1) * step] for x in range(x0, width, dx))
                for row in rows[y0::dy]
            ]
            for x0, y0, dx, dy in ADAM7
            if x0 < width and y0 < height
        ]
    deflate = zlib.compressobj(9)
    parts: list[bytes] = []
    number = 0
    for rows_of_pass in passes:
        above = bytes(len(rows_of_pass[0])) if rows_of_pass else b""
        for row in rows_of_pass:
            kind = number % 5
            filtered = row if pixels is None else _filtered(kind, row, above, step)  # zeros stay zeros
            parts.append(deflate.compress(bytes([kind]) + filtered))
            above = row
            number += 1
    parts.append(deflate.flush())
    compressed = b"".join(parts)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 1 if interlaced else 0)
    idats = [chunk(b"IDAT", compressed[i : i + idat_size]) for i in range(0, len(compressed), idat_size)]
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + b"".join(chunk(kind, data) for kind, data in extra)
        + b"".join(idats)
        + chunk(b"IEND", b"")
    )


def _filtered(kind: int, row: bytes, above: bytes, step: int) -> bytes:
    out = bytearray(len(row))
    for i, value in enumerate(row):
        left = row[i - step] if i >= step else 0
        up = above[i]
        corner = above[i - step] if i >= step else 0
        if kind == 1:
            value -= left
        elif kind == 2:
            value -= up
        elif kind == 3:
            value -= (left + up) // 2
        elif kind == 4:
            estimate = left + up - corner  # Paeth: the nearest of the three, ties in this order
            distances = [(abs(estimate - near), order, near) for order, near in enumerate((left, up, corner))]
            value -= min(distances)[2]
        out[i] = value & 0xFF
    return bytes(out)


def rle_bitmap(width: int, height: int) -> bytes:
    """A BMP of ``width``×``height`` black pixels in 8-bit run-length encoding: runs of 255 pixels,
    two bytes each (~400 KB for 7000×7000, 49 million pixels)."""
    run = bytes([255, 0]) * (width // 255) + (bytes([width % 255, 0]) if width % 255 else b"")
    data = (run + b"\x00\x00") * height + b"\x00\x01"  # each row, end of line; end of bitmap
    palette = bytes(4 * 256)
    offset = 14 + 40 + len(palette)
    header = b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 8, 1, len(data), 2835, 2835, 256, 0)
    return header + info + palette + data
