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
    """A JSON body, or a list of server-sent-event chunks to stream, and how to deliver it.

    ``raw`` replaces the encoded ``body`` byte for byte (a truncated document); ``hold`` delays the
    answer (a stalled provider); ``drop`` closes the connection after ``events`` instead of ending
    the body (a connection cut mid-stream); ``chunked=False`` sends ``events`` without chunked
    framing, the end of the body being the end of the connection.
    """

    status: int = 200
    body: Any = None
    events: list[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    hold: float = 0.0
    drop: bool = False
    chunked: bool = True


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line only when named, as Anthropic does)."""
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def cut_in_half(data: Any) -> bytes:
    """The first half of ``data``'s JSON encoding: what a truncated upstream buffer delivers."""
    encoded = dumps(data).encode()
    return encoded[: len(encoded) // 2]


def sse_cut(data: Any, event: str | None = None) -> bytes:
    """An SSE event, properly terminated, whose ``data:`` JSON is cut in half."""
    head = f"event: {event}\n" if event else ""
    return head.encode() + b"data: " + cut_in_half(data) + b"\n\n"


def chunks(text: str, size: int = 24) -> list[str]:
    """Split streamed text into deltas of about ``size`` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def retry_after_header(seconds: float | None) -> dict[str, str]:
    if seconds is None:
        return {}
    value = str(int(seconds)) if float(seconds).is_integer() else str(seconds)
    return {"retry-after": value}
