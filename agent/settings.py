"""The agent's settings: the one place each of them and its default is declared.

These pydantic models are the ``config.yaml`` sections the agent core reads; ``gateway.config`` adds
the gateway's sections and loads the file. The core receives these objects as they are (no copies
with defaults of their own), and ``config/config.yaml`` and the table in docs/config.md are generated from
the ``description`` of each field, so code, example file and documentation cannot drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

ProviderKind = Literal["anthropic", "openai"]
MaxTokensPolicy = Literal["continue", "notify"]
Toolset = Literal[
    "memory",
    "session_search",
    "skills",
    "todo",
    "delegate",
    "cron",
    "web",
    "mcp",
    "terminal",
    "files",
    "browser",
]
ALL_TOOLSETS: tuple[Toolset, ...] = (
    "memory",
    "session_search",
    "skills",
    "todo",
    "delegate",
    "cron",
    "web",
    "mcp",
    "terminal",
    "files",
    "browser",
)
# The tool sets that reach the owner's machine and accounts: MCP servers, shell commands, files, and a
# browser (a logged-in page acts for whoever drives it).
OWNER_TOOLSETS: frozenset[Toolset] = frozenset({"mcp", "terminal", "files", "browser"})
# The owner's hands are off until the owner names them in agent.toolsets: a shell is never a surprise,
# nor a Chromium process.
OPT_IN_TOOLSETS: frozenset[Toolset] = frozenset({"terminal", "files", "browser"})
DEFAULT_TOOLSETS: tuple[Toolset, ...] = tuple(
    toolset for toolset in ALL_TOOLSETS if toolset not in OPT_IN_TOOLSETS
)
# What group chats and people other than the owner get by default: everything but the owner's
# (gateway.tools_for_guests).
GUEST_TOOLSETS: tuple[Toolset, ...] = tuple(
    toolset for toolset in ALL_TOOLSETS if toolset not in OWNER_TOOLSETS
)

# Strict number types: YAML's `true` is not a count of tokens (lax pydantic would read it as 1).
# A StrictFloat still takes an integer such as `120`.


class Section(BaseModel):
    """A config section: unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class FallbackModel(Section):
    """A model that answers when a session's own keeps failing (overloaded, 5xx, timeouts, dropped
    connections) after its retries; see docs/failures.md, "Fallback models"."""

    provider: ProviderKind = Field(description="anthropic | openai (any compatible server via base_url).")
    name: str = Field(min_length=1, description="Model name as the provider spells it.")
    base_url: str | None = Field(
        None,
        description="API endpoint; null = model.base_url when the provider is model.provider, else the "
        "SDK default.",
    )
    api_key_env: str | None = Field(
        None,
        description="Environment variable holding its API key; null = the one model.provider's key is "
        "read from when the provider is the same, else ANTHROPIC_API_KEY or OPENAI_API_KEY.",
    )

    def same_model(self, provider: object, name: object, base_url: object) -> bool:
        return (self.provider, self.name, self.base_url) == (provider, name, base_url)


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
    fallbacks: list[FallbackModel] = Field(
        default_factory=list,
        description="Models that answer, in this order, when a session's own model still fails after its "
        "retries (overloaded, 5xx, timeouts, dropped connections; never a request refused as invalid or a "
        "spend limit), each with one line saying so, e.g. [{provider: anthropic, name: claude-haiku-4-5}]; "
        "keys: provider, name, base_url, api_key_env.",
    )
    fallback_probe_interval: StrictFloat = Field(
        30.0,
        gt=0,
        description="While a model is failing, its requests go straight to the fallbacks, and at most this "
        "often (seconds) a request starts a one-token probe of it in the background; once one is answered "
        "the model is used again.",
    )

    @field_validator("fallbacks")
    @classmethod
    def _fallbacks_differ(cls, value: list[FallbackModel], info: ValidationInfo) -> list[FallbackModel]:
        """Neither the model itself nor one model twice (provider, name and base_url make a model)."""
        model = (info.data.get("provider"), info.data.get("name"), info.data.get("base_url"))
        for index, fallback in enumerate(value):
            if fallback.same_model(*model):
                raise ValueError(f"entry {index} is the model itself ({fallback.name})")
            if any(fallback.same_model(f.provider, f.name, f.base_url) for f in value[:index]):
                raise ValueError(f"entry {index} ({fallback.name}) is listed twice")
        return value


class PromptCachingSettings(Section):
    """How Anthropic cache breakpoints are placed, and when a request counts as a cache miss."""

    cache_ttl: Literal["5m", "1h", "auto"] = Field(
        "auto",
        description="Cache lifetime of breakpoints: 5m | 1h | auto (1h for the system prompt, and for "
        "the conversation tail too when the chat is paced slower than 5 minutes).",
    )
    policy: Literal["layered", "system_and_3"] = Field(
        "layered",
        description="Breakpoint placement: layered (measured best in docs/benchmarks.md) | system_and_3.",
    )
    miss_min_tokens: StrictInt = Field(
        1024,
        ge=1,
        description="A request that read at least this many tokens less from the cache than it should "
        "have is reported as a cache miss with its cause (herald insights, /insights, /metrics).",
    )
    miss_min_share: StrictFloat = Field(
        0.1,
        ge=0,
        le=1,
        description="A cache miss must also be at least this share of what the request should have read "
        "(token counts are estimates: smaller differences are noise).",
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


DEFAULT_BATCH_DEADLINE = 7200.0  # seconds: most batches end within an hour; two leave room for a slow one


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
        default_factory=lambda: list(DEFAULT_TOOLSETS),
        description="Enabled tool sets: memory, session_search, skills, todo, delegate (sub-agents), cron "
        "(scheduled jobs; the gateway runs them), web (web_fetch, and web_search when web.search has a "
        "provider), mcp (the tools of mcp.servers), terminal (shell commands in tools.workspace, dangerous "
        "ones held for approval) and files (read, write, patch, list and search files in tools.workspace "
        "and tools.allowed_paths): these two are off unless named here, and serve only the owner. New "
        "sessions only: a session keeps the tools it started with.",
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
    review_batch: StrictBool = Field(
        False,
        description="Send background reviews through the provider's batch API (Anthropic Message Batches, "
        "OpenAI Batch): half price, the same prompt cache, answered within agent.batch_deadline; a review "
        "whose batch has not ended by then is sent normally. A provider without a batch API gets normal "
        "requests (logged once).",
    )
    batch_deadline: StrictFloat = Field(
        DEFAULT_BATCH_DEADLINE,
        ge=60,
        le=86_400,
        description="Seconds a request sent through a batch API (a background review with review_batch, a "
        "scheduled job with batch: true and no batch_deadline of its own) may wait for its answer; a batch "
        "not ended by then is cancelled and the request sent normally. Most batches end within an hour, "
        "all within 24 h.",
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
    vision: StrictBool | None = Field(None)
    pdf: StrictBool | None = Field(None)


class MediaSettings(Section):
    """Photos and files people send: what reaches the model, and the limits (a file over one is refused
    with a reply that names the limit)."""

    image_max_edge: StrictInt = Field(
        1568,
        ge=200,
        le=8000,
        description="Images are scaled down to at most this many pixels on their longer side before they "
        "are sent (1568 is what Anthropic recommends; larger costs tokens without helping).",
    )
    image_max_megapixels: StrictFloat = Field(
        50.0,
        gt=0,
        le=500,
        description="Images with more pixels than this (in millions) are refused before they are decoded.",
    )
    image_decode_memory_mb: StrictInt = Field(
        256,
        ge=64,
        description="Memory (in MB) that decoding images may take at once, all images together. JPEG and "
        "PNG decode reduced and need little (a 50-megapixel PNG about 70 MB); WebP, TIFF and JPEG 2000 "
        "decode whole and need 10-20 bytes a pixel. Images wait their turn; one that alone needs more is "
        "refused.",
    )
    pdf_max_pages: StrictInt = Field(
        100, ge=1, le=1000, description="PDFs with more pages than this are refused."
    )
    document_max_chars: StrictInt = Field(
        100_000,
        ge=1000,
        description="Text read from a file (a text file, or a PDF the model cannot read natively) longer "
        "than this is refused.",
    )
    files_max_context_share: StrictFloat = Field(
        0.5,
        gt=0,
        le=1,
        description="Files may take at most this share of the session model's context window (estimated "
        "tokens of the new message's files and of those still in the conversation, which every request "
        "sends again); a file that would go over is refused.",
    )
    files_max_per_request: StrictInt = Field(
        100,
        ge=1,
        description="Images plus PDF pages one request may carry, the conversation's earlier files "
        "included (Anthropic takes 100 in all); a file that would go over is refused.",
    )


class SpeechToTextSettings(Section):
    """Voice notes and audio files: transcribed, and the transcript goes to the model as the person's
    words. Any server that speaks OpenAI's transcription API works (OpenAI, a local Whisper server)."""

    provider: Literal["openai"] | None = Field(
        None,
        description="openai (OpenAI's transcription API, or a compatible server at base_url); null = voice "
        "notes are not transcribed and the person is told so.",
    )
    model: str = Field("whisper-1", min_length=1, description="Transcription model name.")
    base_url: str | None = Field(
        None, description="Transcription endpoint; null = OpenAI's (OPENAI_BASE_URL is honoured)."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        min_length=1,
        description="Environment variable holding the transcription API key (optional with a base_url: "
        "a local server that needs none is sent the placeholder no-key).",
    )
    language: str | None = Field(
        None, description="Spoken language as an ISO-639-1 code (e.g. de); null = detected."
    )
    timeout: StrictFloat = Field(120.0, gt=0, description="Seconds to wait for one transcription.")
    reply_with_transcript: StrictBool = Field(
        False, description="Also post the transcript into the chat, so the person sees what was heard."
    )
    price_per_minute: StrictFloat | None = Field(
        None,
        ge=0,
        description="USD per minute of audio, for insights and spend limits; null = OpenAI's price of the "
        "model (0.006 for whisper-1 and gpt-4o-transcribe, 0.003 for gpt-4o-mini-transcribe). Set 0 for a "
        "free local server.",
    )


class TextToSpeechSettings(Section):
    """Spoken replies: an answer comes back as a voice note (OGG/Opus) on Telegram and Discord, with the
    text beside it when it is long or has code, links or tables. Synthesis that fails sends the text."""

    provider: Literal["openai", "edge"] | None = Field(
        None,
        description="openai (OpenAI's speech API, or a compatible server at base_url) | edge (Microsoft "
        "Edge's read-aloud voices through edge-tts: free, no key, needs the internet); null = answers are "
        "always text.",
    )
    mode: Literal["off", "voice_in", "always"] = Field(
        "voice_in",
        description="When an answer is spoken: voice_in (the answer to a voice note) | always (every "
        "answer) | off.",
    )
    model: str = Field("tts-1", min_length=1, description="Speech model (openai only).")
    voice: str | None = Field(
        None,
        description="Voice name; null = alloy (openai) or en-US-EmmaMultilingualNeural (edge; `edge-tts "
        "--list-voices` lists them).",
    )
    base_url: str | None = Field(
        None, description="Speech endpoint (openai only); null = OpenAI's (OPENAI_BASE_URL is honoured)."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        min_length=1,
        description="Environment variable holding the speech API key (openai only; optional with a "
        "base_url: a local server that needs none is sent the placeholder no-key).",
    )
    timeout: StrictFloat = Field(
        60.0,
        gt=0,
        description="Seconds a spoken reply may take to synthesise, retries included; then the text is "
        "sent instead.",
    )
    text_over_chars: StrictInt = Field(
        600,
        ge=0,
        description="An answer whose spoken form is longer than this many characters also comes as text "
        "(one with code, a link or a table always does).",
    )
    max_chars: StrictInt = Field(
        2000,
        ge=100,
        le=4000,
        description="At most this many characters are spoken (billed per character); a longer answer is "
        "spoken up to a sentence end and the full answer comes as text.",
    )
    price_per_million_chars: StrictFloat | None = Field(
        None,
        ge=0,
        description="USD per million characters spoken, for insights and spend limits; null = 15 for "
        "openai (tts-1; 30 for tts-1-hd) and 0 for edge. Set 0 for a free local server.",
    )


class WebSearchSettings(Section):
    """The web_search tool: offered to new sessions only when a provider is set."""

    provider: Literal["searxng", "brave", "tavily"] | None = Field(
        None, description="searxng (self-hosted, needs searxng_url) | brave | tavily; null = no web_search."
    )
    searxng_url: str | None = Field(
        None,
        description="Base URL of your SearXNG instance (its settings.yml must list json under "
        "search.formats).",
    )
    brave_api_key_env: str = Field(
        "BRAVE_API_KEY", min_length=1, description="Environment variable holding the Brave Search API key."
    )
    brave_url: str = Field(
        "https://api.search.brave.com/res/v1/web/search", description="Brave Search API endpoint."
    )
    tavily_api_key_env: str = Field(
        "TAVILY_API_KEY", min_length=1, description="Environment variable holding the Tavily API key."
    )
    tavily_url: str = Field("https://api.tavily.com/search", description="Tavily search API endpoint.")
    max_results: StrictInt = Field(5, ge=1, le=20, description="Results per search.")
    timeout: StrictFloat = Field(15.0, gt=0, description="Seconds to wait for one search.")
    price_per_query: StrictFloat | None = Field(
        None,
        ge=0,
        description="USD per search, for insights and spend limits; null = the provider's list price "
        "(brave 0.005, tavily 0.008, searxng 0). Set it to what your plan costs.",
    )


class BrowserSettings(Section):
    """The browser tools (tool set ``browser``, opt-in, owner only): Chromium driven by Playwright, its
    every connection through the same address rule as web_fetch (web.allow_private)."""

    executable: Path = Field(
        Path("/usr/bin/chromium"),
        description="The Chromium program (Debian: apt-get install chromium); Herald never downloads one.",
    )
    max_pages: StrictInt = Field(
        5, ge=1, le=50, description="Pages (tabs) one session may have open; more are closed at once."
    )
    idle_timeout: StrictFloat = Field(
        600.0, gt=0, description="Seconds a session's browser may sit unused before it is closed."
    )
    timeout: StrictFloat = Field(
        20.0, gt=0, le=300, description="Seconds one browser action (a navigation, a click, a wait) may take."
    )
    max_snapshot_chars: StrictInt = Field(
        20_000,
        ge=1000,
        le=200_000,
        description="Longest page snapshot returned to the model; a longer one is cut, with a sentence "
        "saying so.",
    )
    max_download_mb: StrictInt = Field(
        25,
        ge=1,
        le=4096,
        description="Largest file a page may download, in MB: saved into the workspace's downloads/ folder, "
        "and only in the owner's sessions when the files or terminal tool set gives Herald a workspace "
        "(tools.workspace_quota_mb applies too); a larger one is stopped and nothing is kept. Without a "
        "workspace every download is refused.",
    )


class WebSettings(Section):
    """The web tools: web_fetch reads a page or feed, web_search searches. What they return is marked as
    untrusted and scanned for prompt injection before the model sees it."""

    allow_private: StrictBool = Field(
        False,
        description="Let web_fetch and the browser reach private, loopback and link-local addresses (your "
        "LAN, 127.0.0.1, 169.254.169.254). Never for guests (gateway.tools_for_guests).",
    )
    timeout: StrictFloat = Field(20.0, gt=0, le=300, description="Seconds one fetch may take in all.")
    max_bytes: StrictInt = Field(
        5_000_000,
        ge=10_000,
        description="Largest response body web_fetch reads, in bytes; a longer one is cut.",
    )
    max_redirects: StrictInt = Field(5, ge=0, le=20, description="Redirects web_fetch follows.")
    max_chars: StrictInt = Field(
        40_000, ge=1000, le=200_000, description="Longest text web_fetch returns to the model."
    )
    user_agent: str = Field(
        "Herald/0.1 (+https://github.com/herald-bot/herald)",
        min_length=1,
        description="User-Agent header of web_fetch and web_search.",
    )
    search: WebSearchSettings = Field(default_factory=WebSearchSettings, description="The web_search tool.")
    browser: BrowserSettings = Field(
        default_factory=BrowserSettings, description="The browser tools (tool set browser)."
    )


class McpServer(Section):
    """One MCP server: a command to start (stdio) or a URL (streamable HTTP)."""

    command: str | None = Field(None, description="Program to start for a stdio server.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment for a stdio server (it gets only PATH, HOME and a few more besides); "
        "$NAME or ${NAME} in a value is read from Herald's environment ($$ = $).",
    )
    cwd: Path | None = Field(None, description="Working directory of a stdio server.")
    url: str | None = Field(None, description="URL of a streamable HTTP server.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers for a URL server, e.g. Authorization: Bearer $TOKEN; $NAME or ${NAME} in a "
        "value is read from Herald's environment ($$ = $).",
    )
    allow: list[str] = Field(
        default_factory=list, description="Only these tools of the server (empty = all)."
    )
    deny: list[str] = Field(default_factory=list, description="Never these tools of the server.")
    timeout: StrictFloat = Field(
        60.0, gt=0, description="Seconds one tool call may take; then the model is told it timed out."
    )
    connect_timeout: StrictFloat = Field(
        20.0,
        gt=0,
        description="Seconds the server gets to start and list its tools, else Herald goes on without it.",
    )
    enabled: StrictBool = Field(True, description="false = keep the entry but do not start the server.")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of command (a stdio server) or url (a streamable HTTP server)")
        return self


class McpSettings(Section):
    """Model Context Protocol servers whose tools the agent may use (tool set mcp). A session's tool list is
    fixed when it starts: tools a server adds later serve new sessions only."""

    servers: dict[str, McpServer] = Field(
        default_factory=dict,
        description="Servers by name; their tools are named NAME__TOOL. E.g. files: {command: npx, args: "
        "[-y, '@modelcontextprotocol/server-filesystem', /srv/docs]}",
    )

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServer]) -> dict[str, McpServer]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}", name):
                raise ValueError(
                    f"server name '{name}' must be 1-32 letters, digits or dashes (it prefixes tool names)"
                )
        return value


ApprovalRule = Literal[
    "recursive_delete",
    "superuser",
    "devices",
    "outside_paths",
    "herald_home",
    "shell_pipe",
    "kill",
    "packages",
    "git_force",
    "permissions",
    "system",
    "opaque",
    "fork_bomb",
    "downloaded_code",
]
APPROVAL_RULES: tuple[ApprovalRule, ...] = get_args(ApprovalRule)


# tools.safe_commands by default: commands that only read and list (agent.hands.proof knows their options
# that would write or run a program, and holds those).
DEFAULT_SAFE_COMMANDS: tuple[str, ...] = (
    "ls", "cat", "head", "tail", "wc", "nl", "tac", "cut", "tr", "sort", "uniq", "comm", "cmp", "diff",
    "grep", "egrep", "fgrep", "rg", "jq", "od", "xxd", "file", "stat", "du", "df", "tree", "pwd", "echo",
    "printf", "true", "false", "whoami", "id", "uname", "date", "basename", "dirname", "realpath",
    "readlink", "which", "md5sum", "sha1sum", "sha256sum", "sha512sum", "cksum", "cd", "exit",
    "git status", "git diff", "git log", "git show", "git rev-parse", "git ls-files", "git blame",
)  # fmt: skip
SAFE_COMMAND = re.compile(r"[A-Za-z0-9_./:@+=,-]+( [A-Za-z0-9_./:@+=,-]+)*")


class ApprovalPattern(Section):
    """A rule of your own: a command any part of which this regular expression matches is held."""

    name: str = Field(min_length=1, max_length=60, description="What the owner is shown, e.g. drops a table.")
    pattern: str = Field(min_length=1, description="A Python regular expression, searched in each command.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"is not a regular expression: {error}") from None
        return value


class ToolsSettings(Section):
    """The owner's hands: the terminal tool set (shell commands) and the files tool set (read, write, patch,
    list, search). Both serve only the owner's sessions unless gateway.tools_for_guests names them."""

    workspace: Path | None = Field(
        None,
        description="Folder commands run in and relative paths start from; null = workspace in the Herald "
        "home (created private).",
    )
    allowed_paths: list[Path] = Field(
        default_factory=list,
        description="Folders besides the workspace the file tools may read and write (absolute, or ~/...); "
        "a command writing anywhere else is held for approval.",
    )
    terminal_timeout: StrictFloat = Field(
        60.0, gt=0, description="Seconds a command may run when the model asks for no other timeout."
    )
    terminal_max_timeout: StrictFloat = Field(
        600.0, gt=0, description="The longest timeout the model may ask a command for, in seconds."
    )
    output_limit: StrictInt = Field(
        10_000,
        ge=1000,
        le=20_000,
        description="Characters of a command's output the model is shown, for stdout and for stderr: the "
        "first and last halves, with a line saying how much was cut between.",
    )
    max_background: StrictInt = Field(
        4, ge=0, le=32, description="Commands one chat may keep running in the background (0 = none)."
    )
    env: list[str] = Field(
        default_factory=list,
        description="Names of Herald's environment variables commands also get (they get only PATH, HOME, "
        "LANG and a few more besides, never Herald's keys and tokens), e.g. [GITHUB_TOKEN].",
    )
    max_file_bytes: StrictInt = Field(
        10_000_000,
        ge=1000,
        description="Largest file read_file reads and write_file writes, in bytes; search_files skips "
        "larger ones.",
    )
    approval_timeout: StrictFloat = Field(
        300.0,
        gt=0,
        le=86_400,
        description="Seconds a held command waits for the owner's answer; no answer is a deny.",
    )
    approval_rules: list[ApprovalRule] = Field(
        default_factory=lambda: list(APPROVAL_RULES),
        description="Built-in rules that say why a command is held (it is held anyway unless proven "
        "harmless: see safe_commands; in a sandbox, a command none of these rules names runs there "
        "without asking): "
        "recursive_delete, superuser "
        "(sudo, su, doas), devices (writing to a disk, formatting), outside_paths (writing outside the "
        "workspace and allowed_paths), herald_home (Herald's own files: keys, database), shell_pipe "
        "(a download or text piped into a shell), kill (processes, services, shutdown), packages "
        "(installs, removals), git_force (push --force, reset --hard, clean -f), permissions (recursive "
        "chmod/chown, setuid), system (mounts, firewall, users, crontab), opaque (a command Herald cannot "
        "read for sure: a name from a variable, eval), fork_bomb, downloaded_code (downloads and runs code).",
    )
    safe_commands: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SAFE_COMMANDS),
        description="The only commands that run without asking (unsandboxed): each a command and maybe its "
        "first words (e.g. 'npm test', 'make check'); a command line runs without a question only when "
        "every command in it starts with one of these, every word is literal (no $, no substitution), "
        "its arguments stay in the workspace and allowed_paths, and it writes nothing but /dev/null. The "
        "default lists commands that only read and list (ls, cat, grep, wc, git status/diff/log/show, ...); "
        "what you add may run the workspace's own code (npm test runs package.json's script).",
    )
    approval_patterns: list[ApprovalPattern] = Field(
        default_factory=list,
        description="More rules: {name, pattern} regular expressions searched in each command, e.g. "
        "[{name: drops a table, pattern: '(?i)\\bdrop\\s+table\\b'}].",
    )
    sandbox: Literal["auto", "none", "bubblewrap", "docker"] = Field(
        "auto",
        description="Where terminal commands and execute_code run: auto = bubblewrap where it works here, "
        "else on this machine unsandboxed (herald doctor and the start-up log say which); bubblewrap = in a "
        "bwrap sandbox (only the system's programs and settings, read-only; the workspace and allowed_paths "
        "writable; empty private /tmp, /run and homes; no host socket, Herald's home and your other files "
        "not there), and if it cannot be had the command tools are not offered; docker = in a container of "
        "sandbox_image, likewise; none = on this machine as Herald's own user, where a command you approve "
        "can do anything that user can.",
    )
    sandbox_network: StrictBool = Field(
        False, description="Whether sandboxed commands may use the network (off: no interface but loopback)."
    )
    sandbox_cpu_seconds: StrictInt = Field(
        300, ge=1, description="CPU time a sandboxed command's processes may each use, in seconds."
    )
    sandbox_memory_mb: StrictInt = Field(
        2048, ge=64, description="Memory a sandboxed process may map (bubblewrap) or the container may use "
        "(docker), in MB."
    )
    sandbox_processes: StrictInt = Field(
        256, ge=8, description="Processes a sandboxed command may run at once (a fork bomb stops there)."
    )
    sandbox_file_mb: StrictInt = Field(
        1024, ge=1, description="Largest file a sandboxed command may write, in MB."
    )
    workspace_quota_mb: StrictInt | None = Field(
        10_240,
        ge=1,
        description="The most space the workspace and allowed_paths may take, in MB, watched while "
        "commands run (sandboxed or not): a command during which they grow past it is stopped, with a "
        "sentence saying so (what it wrote stays; a command that frees space is never stopped). "
        "null = no quota.",
    )
    sandbox_scratch_mb: StrictInt = Field(
        512,
        ge=1,
        description="bubblewrap: the size of each private scratch folder of a sandbox (/tmp, /var/tmp, /run, "
        "/home, /root), in MB; they are kept in memory and gone when the command ends.",
    )
    sandbox_image: str = Field(
        "python:3.12-slim",
        min_length=1,
        description="docker: the image commands run in (it must have bash or sh, and python3 for "
        "execute_code); pulled by you beforehand, Herald does not pull.",
    )
    docker_url: str | None = Field(
        None,
        description="docker: the Engine's address, e.g. unix:///var/run/docker.sock; null = DOCKER_HOST, "
        "else the default socket.",
    )

    @field_validator("safe_commands")
    @classmethod
    def _plain_words(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not SAFE_COMMAND.fullmatch(entry):
                raise ValueError(
                    f"'{entry}' must be plain words separated by single spaces (no quotes, $, ;, | or >)"
                )
        return value

    @field_validator("workspace", "allowed_paths")
    @classmethod
    def _absolute(cls, value: Path | list[Path] | None) -> Path | list[Path] | None:
        for path in value if isinstance(value, list) else [value] if value is not None else []:
            if not path.expanduser().is_absolute():
                raise ValueError(f"'{path}' is not an absolute path (or ~/...)")
        return value

    @model_validator(mode="after")
    def _timeouts(self) -> ToolsSettings:
        if self.terminal_timeout > self.terminal_max_timeout:
            raise ValueError("tools.terminal_timeout is longer than tools.terminal_max_timeout")
        return self


DEDUPLICATION_DAYS = 2  # a platform redelivers for up to a day (Telegram's updates, Slack's catch-up)
CONSOLE_DAYS = 31  # the console's longest window of single requests (30 days in any time zone)


class RetentionSettings(Section):
    """How long Herald keeps what only grows (docs/storage.md: what each table keeps and for how long).
    Sessions and their messages are kept until the owner deletes them (``herald sessions delete``). The
    gateway prunes in the background (the leader of a cluster), a small batch at a time;
    ``herald storage prune`` does the same at once."""

    inbox_days: StrictFloat = Field(
        7.0,
        ge=DEDUPLICATION_DAYS,
        description="Days a delivered message's inbox row and its sent or failed outbox rows are kept. At "
        f"least {DEDUPLICATION_DAYS}: the inbox's rows are how a platform's redelivery is answered once, "
        "and platforms redeliver for up to a day. A chat's latest inbox row is kept (the console names the "
        "chat by it).",
    )
    usage_days: StrictFloat = Field(
        90.0,
        ge=CONSOLE_DAYS,
        description="Days each model request's own usage row is kept; older ones are added into one row per "
        "day, session, purpose and model, so insights, the console's totals and budgets stay exact (the "
        f"console's charts of single requests reach {CONSOLE_DAYS} days back at most).",
    )
    cache_miss_days: StrictFloat = Field(
        90.0,
        gt=0,
        description="Days cache-miss events are kept (insights then count the misses of these days).",
    )
    audit_days: StrictFloat = Field(
        365.0,
        gt=0,
        description="Days the audit of the owner's tools (tool_audit) and decided or expired approvals are "
        "kept.",
    )
    interval: StrictFloat = Field(
        3600.0, ge=60, description="Seconds between the gateway's background prunes."
    )
    batch_rows: StrictInt = Field(
        500,
        ge=10,
        le=10_000,
        description="Rows deleted (or rolled up) per transaction: a batch never holds the database for long.",
    )


class StorageSettings(Section):
    """Where Herald keeps its state: sessions, messages, usage, inbox, outbox, jobs, pairings."""

    url: str | None = Field(
        None,
        description="null = state.db (SQLite) in the Herald home, nothing to install; "
        "postgresql://USER@HOST:PORT/DATABASE for a database several processes share. A value $NAME is "
        "read from the environment (keep the password there or in .env, e.g. $HERALD_DATABASE_URL, or "
        "in PGPASSWORD).",
    )
    pool_size: StrictInt = Field(
        10, ge=1, le=200, description="PostgreSQL connections per process (as many again may open in bursts)."
    )
    connect_timeout: StrictFloat = Field(
        10.0, gt=0, le=300, description="Seconds to wait for a PostgreSQL connection."
    )
    retention: RetentionSettings = RetentionSettings()

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: str | None) -> str | None:
        """The rule every command opens the database by (``parse_storage_url``), applied when the file is
        read, at ``config set`` and in doctor; a ``$NAME`` is checked once resolved, by the same rule."""
        if value is not None and not value.startswith("$"):
            from agent.db.urls import parse_storage_url  # SQLAlchemy: only when a URL is set

            parse_storage_url(value, Path("state.db"))  # raises BadStorageUrl (a ValueError) saying why
        return value
