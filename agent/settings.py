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
MaxTokensPolicy = Literal["continue", "notify"]
Toolset = Literal["memory", "session_search", "skills", "todo", "delegate", "cron"]
ALL_TOOLSETS: tuple[Toolset, ...] = ("memory", "session_search", "skills", "todo", "delegate", "cron")

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
    on_max_tokens: MaxTokensPolicy = Field(
        "continue",
        description="An answer cut off by model.max_tokens: continue (ask the model once to go on where "
        "it stopped; both parts make one answer) | notify (keep it as it is). Either way, an answer "
        "still cut off comes with one line saying so and how to raise the limit.",
    )
    toolsets: list[Toolset] = Field(
        default_factory=lambda: list(ALL_TOOLSETS),
        description="Enabled tool sets: memory, session_search, skills, todo, delegate (sub-agents), cron "
        "(scheduled jobs; the gateway runs them).",
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


class DelegateSettings(Section):
    """Sub-agents started by the delegate tool: they reuse the session's prompt, so they read its cache."""

    max_children: StrictInt = Field(4, ge=1, le=16, description="Tasks one delegate call may start.")
    max_concurrency: StrictInt = Field(3, ge=1, le=16, description="Sub-agents running at once per call.")
    max_depth: StrictInt = Field(
        1, ge=1, le=3, description="How deep delegation may nest (1: sub-agents may not delegate again)."
    )
    max_iterations: StrictInt = Field(10, ge=1, le=100, description="Model calls per sub-agent.")
    max_output_tokens: StrictInt = Field(
        8000, ge=100, le=200_000, description="Output tokens one sub-agent may spend in all."
    )
    timeout: StrictFloat = Field(300.0, gt=0, description="Seconds a sub-agent may run before it is stopped.")


class ReviewSettings(Section):
    """Background review: the agent looks back over a conversation and saves what is worth keeping."""

    enabled: StrictBool = Field(True, description="Run background reviews (in `herald gateway run`).")
    every_turns: StrictInt = Field(
        10, ge=1, le=1000, description="Review a session after this many user turns since its last review."
    )
    idle_after: StrictFloat = Field(
        1800.0,
        ge=0,
        description="Also review a session idle this many seconds with turns not yet reviewed; 0 = never.",
    )
    max_iterations: StrictInt = Field(6, ge=1, le=50, description="Model calls one review may make.")


class ModelOverride(Section):
    """One entry of the model table (prices in USD per million tokens)."""

    context_length: StrictInt | None = Field(None, gt=1000)
    min_cache_tokens: StrictInt | None = Field(None, ge=0)
    input: StrictFloat | None = Field(None, ge=0)
    output: StrictFloat | None = Field(None, ge=0)
    cache_write_5m: StrictFloat | None = Field(None, ge=0)
    cache_write_1h: StrictFloat | None = Field(None, ge=0)
    cache_read: StrictFloat | None = Field(None, ge=0)
