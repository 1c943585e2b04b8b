"""Make model output safe to encode and send.

Model answers reach us as Python strings that may hold what no platform accepts: lone surrogates
(UTF-8 encoding raises on them, so the send would fail, or the Markdown parser crashes first) and
control characters (invisible, and rejected or mangled by chat clients). Cleaning them once, before
rendering, keeps every later step total: a platform's renderer (``Capabilities.render``) gets text
that went through :func:`sanitize_text`.
"""

from __future__ import annotations

from adapters.text.controls import CONTROLS
from agent.files import valid_text

_DROP_CONTROLS: dict[int, None] = dict.fromkeys(CONTROLS)


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
