"""A batch's answer as stored until it is used (``agent.store.batches``).

A batch request is the very body a normal request of the same :class:`~agent.model.provider.ProviderRequest`
sends (``Provider.build_body``: the same system blocks, tools and cache breakpoints), wrapped in the
provider's batch envelope; only the transport's own fields (OpenAI's ``stream``) are left out. So it
reads and writes the same prompt-cache entries, at half the price.
"""

from __future__ import annotations

import json
from typing import Any

from agent.model.messages import ToolCall
from agent.model.provider import ProviderResponse
from agent.usage import Usage

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
)


def response_json(response: ProviderResponse) -> str:
    """An answer as stored until it is used (a restart in between gives it again, unbilled)."""
    return json.dumps(
        {
            "text": response.text,
            "tool_calls": [[call.id, call.name, call.arguments_json] for call in response.tool_calls],
            "stop_reason": response.stop_reason,
            "usage": {name: getattr(response.usage, name) for name in USAGE_FIELDS},
        },
        ensure_ascii=False,
        sort_keys=True,
    )


def response_from_json(text: str) -> ProviderResponse:
    data: dict[str, Any] = json.loads(text)
    calls = tuple(ToolCall(id=i, name=n, arguments_json=a) for i, n, a in data["tool_calls"])
    usage = Usage(**{name: int(data["usage"].get(name, 0)) for name in USAGE_FIELDS})
    return ProviderResponse(data["text"], calls, data["stop_reason"], usage)
