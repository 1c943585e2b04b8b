"""Valid text at every edge: nothing that cannot be encoded is ever stored or sent.

Text reaches Herald from command-line arguments and stdin (bytes that are not UTF-8 arrive as lone
surrogates through Python's ``surrogateescape``), from files people edit by hand (``.env``,
``config.yaml``, memory files), from chat platforms, and from model providers (JSON may escape a lone
surrogate). SQLite and the SDKs encode UTF-8 strictly, so one such character would fail a whole turn
deep inside the store, or on the wire. So every boundary where text enters passes it through
:func:`valid_text` (strings) or :func:`decode_text` / :func:`read_text` (bytes, files); inside, all
text can be assumed valid, and what is stored is exactly what is sent.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
NUL = "\x00"


def valid_text(text: str) -> str:
    """``text`` as valid Unicode that every store takes: surrogate pairs joined, lone surrogates replaced
    by U+FFFD, NUL characters (PostgreSQL's text cannot hold them, and no one means one) dropped.

    Text without either (nearly all of it) is returned as is, without a copy.
    """
    if NUL in text:
        text = text.replace(NUL, "")
    if _SURROGATE.search(text) is None:
        return text
    # UTF-16 is the one codec where a high+low pair means one character: encoding with
    # surrogatepass and decoding joins real pairs and replaces only what is left alone.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 ``data`` as text; invalid bytes become U+FFFD with one logged warning naming ``source``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        log.warning(
            "%s is not valid UTF-8 (first bad byte at offset %d); bad bytes are read as %r. "
            "Save the file as UTF-8 to fix this.",
            source,
            error.start,
            REPLACEMENT,
        )
        return data.decode("utf-8", "replace")


def read_text(path: Path) -> str:
    """The text of a file people may edit by hand, never failing on its encoding (OSError still can)."""
    return decode_text(path.read_bytes(), str(path))
