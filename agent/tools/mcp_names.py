"""Tool names ``server__tool`` that every provider accepts (``^[a-zA-Z0-9_-]{1,64}$``).

Deterministic: the same server and tool name always give the same name, so the same catalogue gives
the same schema bytes (cache invariant 4). A tool name that had to change (characters outside the
pattern, or too long) gets a short hash of the original, so two tools never end up with one name.
"""

from __future__ import annotations

import hashlib
import re

SEPARATOR = "__"  # server names have no underscore (agent.settings), so the first "__" ends the server
MAX_NAME = 64
HASH_CHARS = 8
_OUTSIDE_PATTERN = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The Herald name of the tool ``tool`` of the MCP server ``server``."""
    plain = f"{server}{SEPARATOR}{tool}"
    if _OUTSIDE_PATTERN.search(tool) is None and tool and len(plain) <= MAX_NAME:
        return plain
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    room = MAX_NAME - len(server) - len(SEPARATOR) - len(digest) - 1
    cleaned = _OUTSIDE_PATTERN.sub("_", tool)[:room]
    return f"{server}{SEPARATOR}{cleaned}_{digest}"


def server_of(name: str) -> str | None:
    """The server part of a Herald tool name, or None when ``name`` is not an MCP tool's."""
    server, separator, _ = name.partition(SEPARATOR)
    return server if separator and server else None
