"""Images for the model: checked, turned upright, scaled to the configured edge and re-encoded.

Re-encoding every image (rather than passing the original through) does three jobs: the file is one the
providers accept (JPEG, or PNG where there is transparency), it is small (a phone photo of 4,000 px
costs ~1,600 tokens whatever its size, so there is no point sending more than the model uses), and the
metadata a phone writes (GPS position, camera serial) never leaves the machine.

The work is CPU-bound and blocking: call :func:`prepare_image` in a thread.
"""

from __future__ import annotations

import io
import math
import warnings
from pathlib import PurePosixPath

from PIL import Image, ImageOps, UnidentifiedImageError

from agent.media.errors import MediaRefused
from agent.media.types import Media

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
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            Image.open(io.BytesIO(data), formats=FORMATS).close()  # reads the header only
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return False
    return True


def prepare_image(data: bytes, *, name: str | None, max_edge: int, max_megapixels: float) -> Media:
    """``data`` as an image the model can read, or :class:`MediaRefused` saying why not.

    The size is checked from the header before anything is decoded, so a decompression bomb (a
    small file of enormous dimensions) is refused without using the memory it asks for.
    """
    what = name or "the image"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
            width, height = image.size
            if width * height > max_megapixels * 1_000_000:
                raise MediaRefused(
                    f"{what} is too large: {width}×{height} pixels ({width * height / 1e6:.0f} megapixels); "
                    f"I take images up to {max_megapixels:g} megapixels (media.image_max_megapixels)."
                )
            image.seek(0)  # the first frame of an animation
            image.load()
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
                f"I can't open HEIC images like {what}; send it as a photo rather than as a file (the app "
                "then sends a JPEG), or as a JPEG."
            ) from None
        raise MediaRefused(
            f"I could not read {what}: it is not an image I can open ({_reason(error)})."
        ) from None
    upright = ImageOps.exif_transpose(image) or image
    transparent = upright.mode in ("RGBA", "LA", "PA") or "transparency" in upright.info
    converted = upright.convert("RGBA" if transparent else "RGB")
    converted.thumbnail((max_edge, max_edge), Image.Resampling.LANCZOS)
    encoded, media_type = _encode(converted, transparent)
    return Media.of(
        "image",
        media_type,
        encoded,
        name=name,
        tokens=image_tokens(*converted.size),
        width=converted.width,
        height=converted.height,
    )


def _encode(image: Image.Image, transparent: bool) -> tuple[bytes, str]:
    """PNG keeps transparency; a PNG too large for the providers, and everything else, is JPEG."""
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
    if isinstance(error, UnidentifiedImageError):
        return "not a format I know"
    text = " ".join(str(error).split())
    return text[:120] if text else type(error).__name__
