"""Images decoded at a memory cost that is bounded per image and in all, whatever people send: a
190 KB PNG of zeros is 7000×7000 pixels, 196 MB decoded whole (issue 19)."""

from __future__ import annotations

import functools
import io
import random
import struct
import zlib

import pytest
from PIL import Image

from agent.media.decode import plan_decode
from agent.media.errors import MediaRefused
from agent.media.images import is_image_file, prepare_image
from agent.media.memory import DecodeBudget
from agent.media.png_strips import png_layout, png_strips
from tests.media_files import PNG_SAMPLES, photo, png_file

EDGE = 1568
MB = 1_000_000
LAYOUTS = [  # (bit depth, colour type): every pixel layout PNG has
    (1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 2), (16, 2), (1, 3), (2, 3), (4, 3), (8, 3),
    (8, 4), (16, 4), (8, 6), (16, 6),
]  # fmt: skip


@functools.cache
def zeros_png(width: int = 7000, height: int = 7000, *, interlaced: bool = False) -> bytes:
    """The file of the issue: transparent black, ~200 KB, 7000×7000."""
    return png_file(width, height, interlaced=interlaced)


def prepare(data: bytes, name: str = "zeros.png", budget: int = 256 * MB) -> tuple[str, int, int]:
    media = prepare_image(data, name=name, max_edge=EDGE, max_megapixels=50, budget=DecodeBudget(budget))
    assert media.width is not None and media.height is not None
    return media.media_type, media.width, media.height


def random_png(depth: int, color_type: int, width: int = 29, height: int = 23) -> bytes:
    """Random rows (padding bits included) in every filter, with a palette and transparency where the
    layout has them."""
    chance = random.Random(depth * 100 + color_type)
    row_bytes = (width * depth * PNG_SAMPLES[color_type] + 7) // 8
    extra: list[tuple[bytes, bytes]] = []
    if color_type == 3:
        extra.append((b"PLTE", chance.randbytes(3 * 2**depth)))
        extra.append((b"tRNS", bytes([0, 128, 255])))
    elif color_type in (0, 2):  # one colour that counts as transparent
        extra.append((b"tRNS", bytes(2 * PNG_SAMPLES[color_type])))
    return png_file(
        width,
        height,
        depth=depth,
        color_type=color_type,
        pixels=chance.randbytes(row_bytes * height),
        extra=tuple(extra),
        idat_size=97,
    )


@pytest.mark.parametrize("rows", [1, 4, 7])
@pytest.mark.parametrize(("depth", "color_type"), LAYOUTS)
def test_a_png_read_strip_by_strip_is_pixel_for_pixel_what_pillow_reads_whole(
    depth: int, color_type: int, rows: int
) -> None:
    data = random_png(depth, color_type)
    whole = Image.open(io.BytesIO(data))
    whole.load()
    strips = list(png_strips(png_layout(data), rows))
    assert [strip.height for strip in strips] == [min(rows, 23 - top) for top in range(0, 23, rows)]
    joined = Image.new(whole.mode, whole.size)
    for number, strip in enumerate(strips):
        assert strip.mode == whole.mode
        assert strip.getpalette() == whole.getpalette()
        assert strip.info.get("transparency") == whole.info.get("transparency")
        joined.paste(strip, (0, number * rows))
    assert joined.tobytes() == whole.tobytes()


def test_a_damaged_or_cut_png_is_refused_like_any_damaged_image() -> None:
    data = random_png(8, 2)
    cut = data[: len(data) // 2]
    with pytest.raises(MediaRefused, match=r"I could not read cut.png: it is not an image I can open \("):
        prepare(cut, "cut.png")
    layout = png_layout(data)
    scrambled = bytearray(data)
    start = data.index(b"IDAT") + 4
    scrambled[start : start + 40] = bytes(range(40))
    with pytest.raises(MediaRefused, match=r"I could not read bad.png: it is not an image I can open \("):
        prepare(bytes(scrambled), "bad.png")
    assert not layout.interlaced


def test_each_format_is_decoded_the_smallest_way_it_allows_at_a_cost_known_before() -> None:
    def plan(data: bytes) -> tuple[str, int, float]:
        image = Image.open(io.BytesIO(data))
        decided = plan_decode(image, data, EDGE)
        return decided.route, decided.scale, decided.cost / MB

    route, _, cost = plan(zeros_png())
    assert route == "PNG strips" and cost < 80  # decoded whole: 196 MB, and then three copies
    assert plan(photo(4000, 3000))[:2] == ("JPEG draft", 2)  # libjpeg decodes at half the size
    assert plan(photo(7000, 7000))[:2] == ("JPEG draft", 4)
    jpeg2000 = io.BytesIO()
    Image.new("RGB", (7000, 7000)).save(jpeg2000, "JPEG2000")
    assert plan(jpeg2000.getvalue())[:2] == ("JPEG 2000 reduce", 4)
    route, _, cost = plan(zeros_png(interlaced=True))
    assert route == "whole" and cost > 196  # interlaced: no strips; still within the default budget
    webp = io.BytesIO()
    Image.new("RGB", (7000, 7000)).save(webp, "WEBP", lossless=True)
    route, _, cost = plan(webp.getvalue())
    assert route == "whole" and cost > 700  # libwebp's two canvases, its copy, Pillow's image


def test_the_file_of_the_issue_is_scaled_and_kept_transparent() -> None:
    assert prepare(zeros_png()) == ("image/png", EDGE, EDGE)
    assert prepare(zeros_png(interlaced=True)) == ("image/png", EDGE, EDGE)


def test_an_image_that_alone_needs_more_than_the_budget_is_refused_without_decoding() -> None:
    webp = io.BytesIO()
    Image.new("RGB", (7000, 7000)).save(webp, "WEBP", lossless=True)
    with pytest.raises(
        MediaRefused,
        match=r"^big.webp is too large to open: a 7000×7000 WEBP image takes about 8\d\d MB of memory to "
        r"decode, and images may take 256 MB \(media.image_decode_memory_mb\); send it as a JPEG or PNG, "
        r"or smaller\.$",
    ):
        prepare(webp.getvalue(), "big.webp")
    small = io.BytesIO()
    Image.new("RGB", (2000, 1500)).save(small, "WEBP")
    assert prepare(small.getvalue(), "small.webp") == ("image/jpeg", EDGE, 1176)


def test_an_icon_holding_a_huge_picture_is_refused_before_pillow_decodes_it() -> None:
    inner = zeros_png()  # an icon's directory says 256×256 at most; Pillow decodes what is inside
    icon = struct.pack("<HHH", 0, 1, 1) + struct.pack("<BBBBHHII", 0, 0, 0, 0, 1, 32, len(inner), 22) + inner
    with pytest.raises(MediaRefused, match=r"holds a picture of 7000×7000 pixels, larger than an icon"):
        prepare(icon, "favicon.ico")
    assert not is_image_file(icon, name=None, media_type=None)


def test_an_orientation_stored_after_the_pixels_of_a_png_still_turns_it() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to show
    upright = png_file(300, 200)
    body = exif.tobytes()
    end = upright.rindex(b"IEND") - 4  # eXIf after the image data, where Pillow reads it by decoding
    chunk = struct.pack(">I", len(body)) + b"eXIf" + body + struct.pack(">I", zlib.crc32(b"eXIf" + body))
    turned = upright[:end] + chunk + upright[end:]
    assert prepare(upright)[1:] == (300, 200)
    assert prepare(turned)[1:] == (200, 300)


def test_16_bit_grey_keeps_its_shades() -> None:
    pixels = struct.pack(">H", 0x8000) * (40 * 30)  # mid grey
    data = png_file(40, 30, depth=16, color_type=0, pixels=pixels)
    media = prepare_image(data, name="scan.png", max_edge=EDGE, max_megapixels=50, budget=DecodeBudget(MB))
    grey = Image.open(io.BytesIO(media.data)).convert("L").getpixel((20, 15))
    assert isinstance(grey, int) and abs(grey - 128) <= 2  # Pillow's convert clips: every shade was white
