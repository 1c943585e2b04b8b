"""Control characters in text bound for a chat: which ones, and masking them one for one.

Control characters are invisible, and chat clients reject or mangle them. The gateway drops them from
a model's answer before rendering (``gateway.delivery.text.sanitize``); a renderer whose conversion can
bring some back (a character reference such as ``&#1;``) masks them with :func:`mask_controls`, which
keeps every offset valid.
"""

from __future__ import annotations

import unicodedata

REPLACEMENT = "\N{REPLACEMENT CHARACTER}"

# Every control character (category Cc: C0, DEL and C1) except tab and newline.
CONTROLS = tuple(
    code for code in range(0xA0) if unicodedata.category(chr(code)) == "Cc" and chr(code) not in "\t\n"
)
_MASK_CONTROLS: dict[int, str] = dict.fromkeys(CONTROLS, REPLACEMENT)


def mask_controls(text: str) -> str:
    """``text`` with each control character except tab and newline replaced by U+FFFD.

    One character for one, and both take one UTF-16 code unit, so entity offsets computed on
    ``text`` stay valid; use this on rendered text, ``sanitize_text`` on a source.
    """
    return text.translate(_MASK_CONTROLS)
