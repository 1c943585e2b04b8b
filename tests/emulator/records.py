"""What the emulator saw: one :class:`RecordedRequest` per HTTP request.

Tests assert cache invariants on these (the exact system/tool bytes per request, the breakpoint
count, the usage that was reported) instead of trusting what the client thinks it sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .tokens import canonical_json


@dataclass
class RecordedRequest:
    """One request as received, with the usage the emulator reported for it."""

    api: str  # "anthropic" | "openai"
    path: str
    model: str
    stream: bool
    body: bytes
    json: dict[str, Any]
    system_json: str = ""
    tools_json: str = ""
    breakpoints: int = 0
    prompt_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    oracle_tokens: int = 0
    status: int = 200
    error: str | None = None
    prompt_cache_key: str | None = None
    reply_text: str = field(default="", repr=False)

    @property
    def batch(self) -> bool:
        """Whether it came in a batch (processed when its batch ended)."""
        return self.path in ("/v1/messages/batches", "/v1/batches")

    @property
    def ok(self) -> bool:
        """True when the request got a complete, successful answer."""
        return self.status == 200 and self.error is None


def anthropic_system_json(body: dict[str, Any]) -> str:
    return canonical_json(body["system"]) if "system" in body else ""


def openai_system_json(body: dict[str, Any]) -> str:
    """The leading system/developer messages, as one JSON list ("" when there are none)."""
    leading: list[Any] = []
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "developer"):
            break
        leading.append(msg)
    return canonical_json(leading) if leading else ""


def tools_json(body: dict[str, Any]) -> str:
    return canonical_json(body["tools"]) if body.get("tools") is not None else ""
