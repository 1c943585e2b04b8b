"""Offline LLM provider emulator: Anthropic Messages + OpenAI Chat Completions with prompt caching.

Real SDKs talk to it via ``base_url``; it models the providers' prefix caches (see
shared/notes/providers.md) so tests and benchmarks can measure cache behaviour offline.
"""

from .cache import Clock
from .records import RecordedRequest
from .script import Reply, ToolUse
from .server import ProviderEmulator

__all__ = ["Clock", "ProviderEmulator", "RecordedRequest", "Reply", "ToolUse"]
