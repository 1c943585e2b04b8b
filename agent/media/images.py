"""Images for the model: checked, turned upright, scaled to the configured edge and re-encoded.

Re-encoding every image (rather than passing the original through) does three jobs: the file is one the
providers accept (JPEG, or PNG where there is transparency), it is small (a phone photo of 4,000 px
costs ~1,600 tokens whatever its size, so there is no point sending more than the model uses), and the
metadata a phone writes (GPS position, camera serial) never leaves the machine.

An image is decoded reduced, at a memory cost estimated and reserved before it is decoded
(:mod:`agent.media.decode`): however large its pixels, it never lies whole in memory where its format
allows, and the images decoding at once never take more than the budget the caller gives.

The work is CPU-bound and blocking: call :func:`prepare_image` in a thread. Pillow is imported by the
functions that use it, when the first file arrives: a process that is never sent a picture (a
terminal's one question) does not load it.
"""

from __future__ import annotations

import io
import math
import struct
import warnings
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from agent.media.errors import MediaRefused
from agent.media.memory import DecodeBudget, return_free_memory
from agent.model.media import Media

if TYPE_CHECKING:
    from PIL import Image, ImageFile

# What Herald opens, and so what "an image" is: formats whose bytes Pillow recognizes by their header.
# Not Pillow's every plugin: EPS would run Ghostscript, and text-based formats (XBM, XPM) could claim a
# source file. Everything opened is re-encoded as JPEG or PNG, so a BMP or a TIFF reaches the model too.
FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "ICO", "PPM", "JPEG2000")
IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ico", ".ppm", ".jp2"}
    | {".heic", ".heif"}
)
HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")
JPEG_QUALITY = 85
MAX_ENCODED_BYTES = 3_750_000  # Anthropic takes 5 MB of base64 per image: 3.75 MB of bytes
TOKENS_PER_PIXEL = 1 / 750  # Anthropic: tokens = width x height / 750
ICON_MAX_EDGE = 1024  # an icon is at most 256 pixels wide by its format; some tools put 512 or 1024
MB = 1_000_000


def image_tokens(width: int, height: int) -> int:
    """What an image of this size costs as input, by Anthropic's published rule."""
    return max(1, math.ceil(width * height * TOKENS_PER_PIXEL))


def is_image_file(data: bytes, *, name: str | None, media_type: str | None) -> bool:
    """Whether a file sent as a file (not as a photo) is an image: its bytes are one of :data:`FORMATS`,
    or its type or name says image (so a damaged one is refused as a damaged image, not described as an
    unknown file). An SVG is text, not a picture, here."""
    if media_type == "image/svg+xml":
        return False
    if (media_type or "").startswith("image/") or PurePosixPath(name or "").suffix.lower() in IMAGE_SUFFIXES:
        return True
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            _open(data).close()  # reads the header only
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return False
    return True


def prepare_image(
    data: bytes, *, name: str | None, max_edge: int, max_megapixels: float, budget: DecodeBudget
) -> Media:
    """``data`` as an image the model can read, or :class:`MediaRefused` saying why not.

    The size is checked from the header before anything is decoded, so a decompression bomb (a
    small file of enormous dimensions) is refused without using the memory it asks for; the image
    then decodes within ``budget`` (waiting while other images use it), or is refused when it alone
    would need more.
    """
    from PIL import Image, UnidentifiedImageError

    from agent.media.decode import decode_reduced, plan_decode

    what = name or "the image"
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image = _open(data)
                width, height = image.size
                if width * height > max_megapixels * 1_000_000:
                    raise MediaRefused(
                        f"{what} is too large: {width}×{height} pixels ({width * height / 1e6:.0f} "
                        f"megapixels); I take images up to {max_megapixels:g} megapixels "
                        "(media.image_max_megapixels)."
                    )
                image.seek(0)  # the first frame of an animation
                transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
                plan = plan_decode(image, data, max_edge)
                if plan.cost > budget.limit:
                    raise MediaRefused(
                        f"{what} is too large to open: a {width}×{height} {image.format} image takes about "
                        f"{plan.cost / MB:,.0f} MB of memory to decode, and images may take "
                        f"{budget.limit / MB:,.0f} MB (media.image_decode_memory_mb); send it as a JPEG or "
                        "PNG, or smaller."
                    )
                with budget.reserve(plan.cost):
                    reduced = decode_reduced(image, data, plan, "RGBA" if transparent else "RGB")
                    reduced.thumbnail((max_edge, max_edge), Image.Resampling.LANCZOS)
                    encoded, media_type = _encode(reduced, transparent)
        except MediaRefused:
            raise
        except Image.DecompressionBombError:  # Pillow's own ceiling, for limits configured above it
            raise MediaRefused(
                f"{what} is too large; I take images up to {max_megapixels:g} megapixels "
                "(media.image_max_megapixels)."
            ) from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
            if _is_heif(data, name):
                raise MediaRefused(
                    f"I can't open HEIC images like {what}; send it as a photo rather than as a file (the "
                    "app then sends a JPEG), or as a JPEG."
                ) from None
            raise MediaRefused(
                f"I could not read {what}: it is not an image I can open ({_reason(error)})."
            ) from None
    finally:
        return_free_memory()
    return Media.of(
        "image",
        media_type,
        encoded,
        name=name,
        tokens=image_tokens(*reduced.size),
        width=reduced.width,
        height=reduced.height,
    )


def _open(data: bytes) -> ImageFile.ImageFile:
    """Pillow's ``open`` (which reads the header), for :data:`FORMATS`. An icon is checked first: Pillow
    decodes an icon as it opens it, at the size of the picture inside, whatever the icon's directory
    says, so a PNG or bitmap of any size in an icon would decode before a size could be checked."""
    from PIL import Image

    if data[:4] == b"\x00\x00\x01\x00":
        _check_icon(data)
    return Image.open(io.BytesIO(data), formats=FORMATS)


def _check_icon(data: bytes) -> None:
    """:class:`OSError` when a picture in an icon is larger than :data:`ICON_MAX_EDGE` by its own header
    (a PNG's, or a bitmap's: twice as high, for its mask)."""
    from agent.media.png_strips import SIGNATURE as PNG_SIGNATURE

    (count,) = struct.unpack_from("<H", data, 4) if len(data) >= 6 else (0,)
    for index in range(count):
        entry = 6 + 16 * index
        if entry + 16 > len(data):
            break
        (offset,) = struct.unpack_from("<I", data, entry + 12)
        head = data[offset : offset + 24]
        if head[:8] == PNG_SIGNATURE and len(head) == 24:
            width, height = struct.unpack(">II", head[16:24])
        elif len(head) >= 12:
            width, height = struct.unpack_from("<ii", head, 4)
            height = abs(height) // 2
        else:
            continue
        if max(abs(width), height) > ICON_MAX_EDGE:
            raise OSError(f"an icon holds a picture of {abs(width)}×{height} pixels, larger than an icon")


def _encode(image: Image.Image, transparent: bool) -> tuple[bytes, str]:
    """PNG keeps transparency; a PNG too large for the providers, and everything else, is JPEG."""
    from PIL import Image

    if transparent:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", optimize=True)
        if buffer.tell() <= MAX_ENCODED_BYTES:
            return buffer.getvalue(), "image/png"
        flat = Image.new("RGB", image.size, "white")
        flat.paste(image, mask=image.getchannel("A"))
        image = flat
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    return buffer.getvalue(), "image/jpeg"


def _is_heif(data: bytes, name: str | None) -> bool:
    """An iPhone's HEIC/HEIF photo (Pillow opens it only with the pillow-heif plugin, not installed)."""
    brand = data[8:12] if data[4:8] == b"ftyp" else b""
    return brand in HEIF_BRANDS or PurePosixPath(name or "").suffix.lower() in (".heic", ".heif")


def _reason(error: BaseException) -> str:
    from PIL import UnidentifiedImageError

    if isinstance(error, UnidentifiedImageError):
        return "not a format I know"
    text = " ".join(str(error).split())
    return text[:120] if text else type(error).__name__
