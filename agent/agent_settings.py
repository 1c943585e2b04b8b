"""What the agent loop and its side tasks are told by the composition root (from the config schema)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.cache_policy import Policy, TtlSetting
from agent.providers.retry import RetryPolicy
from agent.settings import DelegateSettings, MaxTokensPolicy


@dataclass(frozen=True)
class AgentSettings:
    """The loop's settings, taken from the config schema (``agent.settings``) by the composition root."""

    max_tokens: int
    max_iterations: int
    cache_policy: Policy
    cache_ttl: TtlSetting
    retry: RetryPolicy
    on_max_tokens: MaxTokensPolicy
    delegate: DelegateSettings
