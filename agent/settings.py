"""The agent's settings: the one place each of them and its default is declared.

These pydantic models are the ``config.yaml`` sections the agent core reads; ``gateway.config`` adds
the gateway's sections and loads the file. The core receives these objects as they are (no copies
with defaults of their own), and ``config/config.yaml`` and the README's table are generated from
the ``description`` of each field, so code, example file and documentation cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

ProviderKind = Literal["anthropic", "openai"]
Toolset = Literal["memory", "session_search", "skills", "todo", "cron"]
ALL_TOOLSETS: tuple[Toolset, ...] = ("memory", "session_search", "skills", "todo", "cron")

# Strict number types: YAML's `true` is not a count of tokens (lax pydantic would read it as 1).
# A StrictFloat still takes an integer such as `120`.


class Section(BaseModel):
    """A config section: unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class ModelSettings(Section):
    """The model new sessions are built for (a session keeps its model for life)."""

    provider: ProviderKind = Field(
        "anthropic",
        description="Which API to speak: anthropic (Messages API) | openai (Chat Completions: OpenAI, "
        "OpenRouter, DeepSeek, or any compatible server via base_url).",
    )
    name: str = Field("claude-sonnet-4-6", min_length=1, description="Model name as the provider spells it.")
    base_url: str | None = Field(
        None,
        description="API endpoint; null = the SDK default (ANTHROPIC_BASE_URL / OPENAI_BASE_URL are "
        "honoured).",
    )
    api_key_env: str | None = Field(
        None,
        description="Environment variable holding the API key; null = ANTHROPIC_API_KEY or OPENAI_API_KEY.",
    )
    context_length: StrictInt | None = Field(
        None, gt=1000, description="Context window in tokens; null = the built-in model table."
    )
    max_tokens: StrictInt = Field(4096, ge=1, le=200_000, description="Maximum tokens per answer.")
    timeout: StrictFloat = Field(120.0, gt=0, description="Seconds to wait for one model request.")
    max_retries: StrictInt = Field(
        3, ge=0, le=10, description="Retries on 429 / 529 / 5xx / timeouts / dropped connections."
    )
    retry_base_delay: StrictFloat = Field(
        1.0, ge=0, description="First backoff in seconds (doubled per retry, jittered; retry-after wins)."
    )


class PromptCachingSettings(Section):
    """How Anthropic cache breakpoints are placed."""

    cache_ttl: Literal["5m", "1h", "auto"] = Field(
        "auto",
        description="Cache lifetime of breakpoints: 5m | 1h | auto (1h for the system prompt, and for "
        "the conversation tail too when the chat is paced slower than 5 minutes).",
    )
    policy: Literal["layered", "system_and_3"] = Field(
        "layered",
        description="Breakpoint placement: layered (measured best in docs/benchmarks.md) | system_and_3.",
    )


class CompressionSettings(Section):
    """Keeping long conversations inside the context window."""

    enabled: StrictBool = Field(True, description="Compress long conversations.")
    threshold: StrictFloat = Field(
        0.50, gt=0, lt=1, description="In-loop compression when the prompt reaches this share of the window."
    )
    target_ratio: StrictFloat = Field(
        0.20, gt=0, lt=1, description="Token budget of the kept tail = threshold tokens x this."
    )
    protect_last_n: StrictInt = Field(20, ge=1, description="Never keep fewer recent messages than this.")
    hygiene_threshold: StrictFloat = Field(
        0.85, gt=0, le=1, description="Session hygiene: compress before a turn at this share of the window."
    )
    hygiene_min_messages: StrictInt = Field(
        4, ge=2, description="Session hygiene leaves sessions with fewer messages than this alone."
    )
    hygiene_max_messages: StrictInt = Field(
        400, ge=10, description="Session hygiene compresses a session with more messages than this."
    )


class AuxiliaryModelSettings(Section):
    """A separate model for one side task; null values mean "the session's own model"."""

    provider: ProviderKind | None = Field(None, description="Provider of the summary model.")
    model: str | None = Field(None, description="Summary model name.")
    base_url: str | None = Field(None, description="Endpoint of the summary model.")


class AuxiliarySettings(Section):
    """Cheaper models for side tasks."""

    compression: AuxiliaryModelSettings = Field(
        default_factory=AuxiliaryModelSettings, description="Model for summaries."
    )


class ContextSettings(Section):
    """The context engine."""

    engine: Literal["compressor"] = Field(
        "compressor", description="Context engine: compressor (the only one)."
    )


class MemorySettings(Section):
    """Curated memory files (MEMORY.md, USER.md), per person and per group chat."""

    memory_char_limit: StrictInt = Field(
        2200, ge=100, description="Size limit of each MEMORY.md in characters."
    )
    user_char_limit: StrictInt = Field(1375, ge=100, description="Size limit of each USER.md in characters.")


class AgentSection(Section):
    """The agent loop and what goes into a new session's prompt."""

    system_message: str = Field("", description="Extra instructions added to every new session's prompt.")
    max_iterations: StrictInt = Field(
        30, ge=1, le=500, description="Model calls per user message before the agent stops and asks."
    )
    toolsets: list[Toolset] = Field(
        default_factory=lambda: list(ALL_TOOLSETS),
        description="Enabled tool sets: memory, session_search, skills, todo, cron (scheduled jobs; "
        "the gateway runs them).",
    )
    project_context: StrictBool = Field(
        True,
        description="Load a project context file (.herald.md, HERALD.md, AGENTS.md, CLAUDE.md, "
        ".cursorrules).",
    )
    context_dir: Path | None = Field(
        None,
        description="Directory the project context file is looked up in; null = the working directory "
        "for `herald chat`, none for the gateway.",
    )
    max_concurrent_requests: StrictInt = Field(
        32, ge=1, le=10_000, description="Model requests in flight at once, over all sessions."
    )


class ModelOverride(Section):
    """One entry of the model table (prices in USD per million tokens)."""

    context_length: StrictInt | None = Field(None, gt=1000)
    min_cache_tokens: StrictInt | None = Field(None, ge=0)
    input: StrictFloat | None = Field(None, ge=0)
    output: StrictFloat | None = Field(None, ge=0)
    cache_write_5m: StrictFloat | None = Field(None, ge=0)
    cache_write_1h: StrictFloat | None = Field(None, ge=0)
    cache_read: StrictFloat | None = Field(None, ge=0)
