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


def voice_note(words: str) -> bytes:
    """An Ogg file whose words the provider emulator reads back (it does not listen: ``SPEECH:``)."""
    return b"OggS\x00\x02" + b"\x00" * 20 + b"SPEECH:" + words.encode() + b"\x00"
