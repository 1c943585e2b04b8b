"""Make model output safe to encode and send.

Model answers reach us as Python strings that may hold what no platform accepts: lone surrogates
(UTF-8 encoding raises on them, so the send would fail, or the Markdown parser crashes first) and
control characters (invisible, and rejected or mangled by chat clients). Cleaning them once, before
rendering, keeps every later step total.
"""

from __future__ import annotations

import unicodedata

from agent.files import valid_text

_REPLACEMENT = "\N{REPLACEMENT CHARACTER}"

# Every control character (category Cc: C0, DEL and C1) except tab and newline.
_CONTROLS = [
    code for code in range(0xA0) if unicodedata.category(chr(code)) == "Cc" and chr(code) not in "\t\n"
]
_DROP_CONTROLS: dict[int, None] = dict.fromkeys(_CONTROLS)
_MASK_CONTROLS: dict[int, str] = dict.fromkeys(_CONTROLS, _REPLACEMENT)


def sanitize_text(text: str) -> str:
    """``text`` with surrogates repaired, line endings made ``\\n`` and control characters removed.

    CR LF and a lone CR become LF (a lone CR is a line break in Markdown too). Tab and LF are kept;
    the other control characters are dropped rather than replaced, since they were invisible anyway.
    Everything else, format characters such as the zero-width joiner of emoji sequences included,
    passes through unchanged.
    """
    text = valid_text(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.translate(_DROP_CONTROLS)


def mask_controls(text: str) -> str:
    """``text`` with each control character except tab and newline replaced by U+FFFD.

    One character for one, and both take one UTF-16 code unit, so entity offsets computed on
    ``text`` stay valid; use this on rendered text, ``sanitize_text`` on a source.
    """
    return text.translate(_MASK_CONTROLS)
