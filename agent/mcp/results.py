"""An MCP tool result as the text the model reads: outside content, so inside the untrusted envelope.

Text blocks are joined; every other block (an image, audio, a resource) is described in one line, never
dropped silently and never pasted as base64. A result with no content but structured content gives
that as JSON. The text is cut before it is wrapped, so the envelope always closes (the registry's own
cap would cut its closing tag).

Pure functions: the same result gives the same bytes (tool results are part of the cached history).
"""

from __future__ import annotations

import json

import mcp_types as types

from agent.tools.registry import MAX_RESULT_CHARS
from agent.untrusted.envelope import mark_untrusted

MAX_TEXT_CHARS = MAX_RESULT_CHARS - 2_000  # room for the envelope and the injection scan's note


def source(server: str, tool: str) -> str:
    """Where a result came from, as the envelope names it."""
    return f"MCP server {server}, tool {tool}"


def result_text(result: types.CallToolResult) -> str:
    """The result's content as plain text (not yet marked)."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) if parts else "(the tool returned nothing)"


def marked(server: str, tool: str, text: str) -> str:
    """``text`` from the server, shortened to fit, in the untrusted envelope."""
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n[... truncated: the result was {len(text):,} characters]"
    return mark_untrusted(source(server, tool), text)


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {_size(block.data)}; not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.name} {block.uri}{_mime(block.mime_type)}]"
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}{_mime(resource.mime_type)}]\n{resource.text}"
    return f"[resource {resource.uri}{_mime(resource.mime_type)}, {_size(resource.blob)}; not shown]"


def _mime(mime_type: str | None) -> str:
    return f" ({mime_type})" if mime_type else ""


def _size(base64_data: str) -> str:
    """The decoded size, from the length alone (the data itself is never decoded)."""
    return f"{len(base64_data.strip().rstrip('=')) * 3 // 4:,} bytes"
