"""Herald's agent core: sessions, prompts, providers, the tool loop and tools (no platform knowledge)."""

from __future__ import annotations

from importlib import metadata


def version() -> str:
    """Herald's installed version (for ``--version`` and the name Herald gives MCP servers)."""
    try:
        return metadata.version("herald")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
