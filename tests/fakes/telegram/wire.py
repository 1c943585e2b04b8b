"""The Bot API wire format: request parameters in, ``{"ok": ...}`` envelopes out.

python-telegram-bot sends form-encoded bodies (multipart when a file is uploaded) in which every
non-string value is JSON-encoded: ``chat_id=42``, ``disable_notification=true``,
``entities=[{...}]``. Other clients send a JSON body. :func:`decode_params` turns all of them into
one plain dict so the method handlers never care how a value travelled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Parameters that are text by nature: never JSON-decoded, so a message "123" or "true" stays text.
STRING_PARAMS = frozenset(
    {
        "text",
        "caption",
        "parse_mode",
        "url",
        "secret_token",
        "action",
        "callback_query_id",
        "file_id",
        "language_code",
        "ip_address",
        "business_connection_id",
        "message_effect_id",
        "inline_message_id",
        "description",
        "short_description",
        "name",
        "title",
        "query",
        "document",
        "photo",
        "audio",
        "video",
        "voice",
        "animation",
        "sticker",
        "thumbnail",
    }
)


class ApiError(Exception):
    """A Bot API failure: becomes ``{"ok": false, "error_code": ..., "description": ...}``."""

    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": False, "error_code": self.status, "description": self.description}
        if self.parameters:
            out["parameters"] = self.parameters
        return out


def bad_request(detail: str) -> ApiError:
    return ApiError(400, f"Bad Request: {detail}")


@dataclass
class Reply:
    """A successful result, optionally with the ``description`` Telegram adds to some answers."""

    result: Any
    description: str | None = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True, "result": self.result}
        if self.description:
            out["description"] = self.description
        return out


@dataclass
class Upload:
    """A file part of a multipart request."""

    filename: str
    content_type: str
    content: bytes = field(repr=False)


def decode_value(name: str, value: Any) -> Any:
    """JSON-decode a string value unless the parameter is text; undecodable strings stay strings."""
    if not isinstance(value, str) or name in STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def decode_params(raw: dict[str, Any]) -> dict[str, Any]:
    return {name: decode_value(name, value) for name, value in raw.items()}


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's limits and entity offsets."""
    return len(text.encode("utf-16-le")) // 2
