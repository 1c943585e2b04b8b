"""Response plans handed from the API modules to the HTTP layer.

The API modules decide everything under the state lock and return an :class:`Outcome`; the server
then only writes bytes, so no lock is held while a client reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """A JSON body, or a list of server-sent-event chunks to stream."""

    status: int = 200
    body: Any = None
    events: list[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line only when named, as Anthropic does)."""
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def chunks(text: str, size: int = 24) -> list[str]:
    """Split streamed text into deltas of about ``size`` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def retry_after_header(seconds: float | None) -> dict[str, str]:
    if seconds is None:
        return {}
    value = str(int(seconds)) if float(seconds).is_integer() else str(seconds)
    return {"retry-after": value}
