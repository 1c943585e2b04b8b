"""``config.yaml``: the schema, validation at start-up, and dotted-key get/set.

Validation errors name the key, the value found and what is allowed, so an operator can fix the file
without reading code. ``set_value`` edits the YAML in place (comments survive) and refuses to write a
value that would make the file invalid. A value given on the command line is read by the key's type in
the schema (:func:`parse_value`), and ``get`` and ``set`` print values the same way
(:func:`format_value`).
"""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError as RoundTripYAMLError

from adapters.base import ChatAddress
from adapters.registry import EXAMPLE, PLATFORMS, platform_variables
from adapters.spec import PlatformSpec, S
from agent.api import ModelInfo, lookup_model, with_context_length
from agent.files import DuplicateKey, load_yaml, make_private_dirs, read_text
from agent.settings import (
    GUEST_TOOLSETS,
    AgentSection,
    AuxiliarySettings,
    CompressionSettings,
    ContextSettings,
    DelegateSettings,
    McpSettings,
    MediaSettings,
    MemorySettings,
    ModelOverride,
    ModelSettings,
    PromptCachingSettings,
    ReviewSettings,
    Section,
    SpeechToTextSettings,
    StorageSettings,
    TextToSpeechSettings,
    Toolset,
    ToolsSettings,
    WebSettings,
)
from gateway.chats import chat_session_key, is_person_id, job_session_key
from gateway.timezones import resolve_timezone


class ConfigError(Exception):
    """Configuration that cannot be used; the message says what to fix."""


SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _person(value: str) -> str:
    """``platform:user_id`` (how ``gateway.admins`` names people), or a ValueError saying so."""
    if not is_person_id(value):
        raise ValueError(f"'{value}' is not platform:user_id (e.g. {EXAMPLE}:12345, or api:alice)")
    return value


class GatewaySettings(Section):
    """Who may use the bot and how `herald gateway run` behaves."""

    admins: list[str] = Field(
        default_factory=list,
        description=f"Owners of the bot as platform:user_id (e.g. {EXAMPLE}:12345): they share the "
        "owner's memory files and may approve pairings.",
    )
    allow_all: StrictBool = Field(
        False, description="Let everyone use the bot, no allowlist or pairing (logged as a warning at start)."
    )
    max_concurrent_turns: StrictInt = Field(
        32,
        ge=1,
        le=10_000,
        description="Agent turns running at once in this process: chats' (one per chat), API requests' and "
        "scheduled runs' together (a run marked batch, waiting for its batch, takes none).",
    )
    busy_policy: Literal["queue", "interrupt"] = Field(
        "queue",
        description="A message that arrives while its chat's turn runs: queue (answered in order after "
        "it) or interrupt (cancel the running turn, answer the new message).",
    )
    max_attachment_mb: StrictFloat = Field(
        20.0,
        gt=0,
        description="A message with a file larger than this (in MB) is refused with a reply saying so; "
        "nothing of it reaches the model. A platform may let bots download less (its section says so).",
    )
    stream_edit_interval: StrictFloat = Field(
        1.0,
        ge=0,
        description="Seconds between edits of an answer that streams into one message; 0 = no streaming "
        "(one message at the end).",
    )
    drain_timeout: StrictFloat = Field(
        30.0,
        ge=0,
        description="On SIGTERM: seconds running turns get to finish before they are checkpointed.",
    )
    tools_for_guests: list[Toolset] = Field(
        default_factory=lambda: list(GUEST_TOOLSETS),
        description="Tool sets (of agent.toolsets) that sessions of group chats and of people other than "
        "gateway.admins get; the rest is left out of their tool list. web_fetch never reaches private "
        "addresses for them, whatever web.allow_private says.",
    )
    http_host: str = Field(
        "127.0.0.1",
        description="Address of the HTTP server (health, metrics, webhooks, the console at /console); "
        "127.0.0.1 keeps it on this machine.",
    )
    http_port: StrictInt = Field(8787, ge=0, le=65535, description="Port of that server (0 = any free port).")

    @field_validator("admins")
    @classmethod
    def _platform_and_user(cls, value: list[str]) -> list[str]:
        for item in value:
            _person(item)
        return value


class SchedulerSettings(Section):
    """Scheduled tasks (cron jobs), run by `herald gateway run`."""

    timezone: str | None = Field(
        None,
        description="Time zone of cron fields and of ISO times without an offset, as an IANA name "
        "(e.g. Europe/Berlin); null = the system's.",
    )
    misfire_grace: StrictInt = Field(
        3600,
        ge=1,
        description="Seconds a run may be late (e.g. missed while the gateway was down) and still run "
        "once at start-up; several missed runs collapse into one; later than this, the job waits for "
        "its next time.",
    )
    poll_interval: StrictFloat = Field(
        5.0,
        gt=0,
        le=3600,
        description="Seconds between reads of the job table, to pick up jobs added or changed by "
        "`herald cron` in another process.",
    )
    max_jobs_per_chat: StrictInt = Field(
        10,
        ge=1,
        le=100_000,
        description="Jobs that may post into one chat; a guest's job past it is refused (the owner and "
        "admins are not limited).",
    )
    max_jobs_per_person: StrictInt = Field(
        10,
        ge=1,
        le=100_000,
        description="Jobs one guest may make, over all chats; one more is refused (the owner and admins "
        "are not limited).",
    )
    guest_min_interval: StrictInt = Field(
        900,
        ge=60,
        le=31_536_000,
        description="Seconds that must pass between two runs of a repeating job made by a guest (900 = "
        "15 minutes); a job that would run more often is refused.",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            resolve_timezone(value)  # raises ValueError naming the problem
        return value


# The connections to the cluster's Redis a gateway process keeps for as long as it runs, one each: the
# connection watch, the approvals channel and the work queue's control channel (pub/sub), and the work
# queue's blocking read (XREADGROUP BLOCK). gateway.cluster.pool says who else takes one, and for how long.
REDIS_LISTENERS = 4
REDIS_CONNECTIONS = 12  # the listeners and 8 for every other command (lease renewals, queue, pacing, caps)


class ClusterSettings(Section):
    """Several gateway processes on one Redis and one PostgreSQL (storage.url): every process is a worker,
    one elected process connects to the platforms. Null redis_url: one process, nothing more to run."""

    redis_url: str | None = Field(
        None,
        description="redis://[:PASSWORD@]HOST:PORT/DB turns cluster mode on (needs storage.url on "
        "PostgreSQL); a value $NAME is read from the environment.",
    )
    instance_id: str | None = Field(
        None,
        description="This process's name in the cluster (logs, /metrics, leases), one running process's: a "
        "second one started with a name in use refuses to start; null = host-pid.",
    )
    leader_ttl: StrictFloat = Field(
        3.0,
        ge=2.0,
        le=300.0,
        description="Seconds the elected connector's lease (and each gateway shard's, and a process's name) "
        "lives without renewal: after a crash another process takes over within this time (a stop hands "
        "over at once). Renewed every third of it: 3/leader_ttl Redis round-trips per second per process "
        "and held lease; a holder that cannot renew for half of it (paused, cut off) stops receiving.",
    )
    lease_ttl: StrictFloat = Field(
        30.0,
        ge=5.0,
        le=600.0,
        description="Seconds a session's lease lives without renewal; a message whose worker died is run "
        "by another process after this.",
    )
    outbox_claim_ttl: StrictFloat = Field(
        30.0,
        ge=5.0,
        le=600.0,
        description="Seconds a process's claim on a reply it is sending lives without renewal; a reply "
        "whose process died is sent by another after this and 5 s more.",
    )
    max_concurrent_turns: StrictInt | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Turns running at once over the whole cluster (chats, API requests and scheduled runs "
        "together); null = no cluster-wide cap (each process still has gateway.max_concurrent_turns).",
    )
    max_concurrent_requests: StrictInt | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Model requests in flight at once over the whole cluster; null = no cluster-wide cap "
        "(each process still has agent.max_concurrent_requests).",
    )

    redis_connections: StrictInt = Field(
        REDIS_CONNECTIONS,
        le=10_000,
        description=f"Most connections one process (each bot of it) opens to Redis: {REDIS_LISTENERS} stay "
        "open while it runs (the connection watch, the approvals and cancel channels, the work queue's "
        "blocking read); the others serve every other command, which waits for a free one when all are in "
        "use (gateway_redis_pool_waits_total). Redis' maxclients must hold the processes times this. At "
        f"least {REDIS_LISTENERS + 1}.",
    )

    @field_validator("redis_connections")
    @classmethod
    def _room_beside_the_listeners(cls, value: int) -> int:
        if value <= REDIS_LISTENERS:
            raise ValueError(
                f"must be at least {REDIS_LISTENERS + 1}: a gateway process keeps {REDIS_LISTENERS} "
                "connections to Redis open for as long as it runs (the connection watch, the approvals and "
                "cancel channels, the work queue's blocking read) and needs at least one more for every "
                f"other command (default {REDIS_CONNECTIONS})"
            )
        return value

    @field_validator("instance_id")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
            raise ValueError("must be 1-63 letters, digits, '.', '_' or '-'")
        return value


class ConsoleSettings(Section):
    """The operator console: pages at /console on the gateway's HTTP server (gateway.http_host and
    http_port). Log in with HERALD_CONSOLE_TOKEN (environment or .env) or a one-time link an admin gets
    by sending /console to the bot."""

    enabled: StrictBool = Field(
        True,
        description="Serve the console. On an address other than loopback (gateway.http_host) it is served "
        "only when HERALD_CONSOLE_TOKEN is set.",
    )
    public_url: str | None = Field(
        None,
        description="The gateway's HTTP address as a browser reaches it, without a path (e.g. "
        "https://herald.example.com behind a reverse proxy that passes /console on unchanged): used in "
        "/console login links, and an https address marks the login cookie Secure; null = this process's "
        "own address.",
    )
    session_hours: StrictFloat = Field(
        12.0, gt=0, le=720, description="Hours a console login lasts before the browser must log in again."
    )

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/?#@]+/?", value):
            raise ValueError(
                "must be an http:// or https:// address without a path, such as https://herald.example.com"
            )
        return value.rstrip("/") if value is not None else None


class ApiKey(Section):
    """One key of the OpenAI-compatible API and the person it acts for."""

    person: str = Field(
        description="Who the key acts for, as platform:user_id: api:NAME for someone who uses the API "
        f"only, or an existing person ({EXAMPLE}:12345) to share their memory, limits and rights."
    )
    key: str | None = Field(
        None, description="$NAME: the key is the variable NAME of the environment or .env (never the key)."
    )
    sha256: str | None = Field(
        None, description="Or the key's SHA-256 as 64 hex digits (the key itself kept nowhere)."
    )
    name: str | None = Field(None, description="A label for logs (default: the person).")
    bot: str | None = Field(
        None,
        description="With bots: the bot the key talks to (its sessions, memory, limits and model); required "
        "there, and not given without bots:.",
    )

    @field_validator("person")
    @classmethod
    def _platform_and_user(cls, value: str) -> str:
        return _person(value)

    @field_validator("key")
    @classmethod
    def _from_environment(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", value):
            raise ValueError(
                "must be $NAME, the environment variable holding the key (put the key itself in .env, "
                "never in config.yaml), or give sha256 instead"
            )
        return value

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not SHA256_HEX.fullmatch(value.lower()):
            raise ValueError("must be the key's SHA-256 as 64 hexadecimal digits")
        return value.lower() if value is not None else None

    @model_validator(mode="after")
    def _one_source(self) -> ApiKey:
        if (self.key is None) == (self.sha256 is None):
            raise ValueError(f"the key of {self.person} needs exactly one of key ($NAME) or sha256")
        return self

    @property
    def label(self) -> str:
        return self.name or self.person


class ApiSettings(Section):
    """The OpenAI-compatible API (/v1/chat/completions, /v1/models) on the gateway's HTTP server
    (gateway.http_host and http_port): any OpenAI client talks to Herald as a model. Served when keys
    are configured."""

    keys: list[ApiKey] = Field(
        default_factory=list,
        description="The API's keys, each acting for one person, e.g. [{key: $HERALD_API_KEY_ALICE, person: "
        "api:alice}]: their memory, spend limits and rights apply; with bots:, each names its bot too (bot: "
        "family); none = the API is not served.",
    )
    model_name: str = Field(
        "herald",
        min_length=1,
        max_length=64,
        description="The one model the API offers (/v1/models); requests name it as their model.",
    )
    max_request_mb: StrictFloat = Field(
        4.0,
        gt=0,
        le=64,
        description="Largest request body in MB (the whole conversation a client sends); a larger one is "
        "refused with a 400 error.",
    )

    @model_validator(mode="after")
    def _distinct(self) -> ApiSettings:
        labels = [(key.bot, key.label) for key in self.keys]  # a label names a key of its bot
        twice = sorted({label for bot, label in labels if labels.count((bot, label)) > 1})
        if twice:
            raise ValueError(f"api.keys: two keys are labelled {', '.join(twice)}: give each its own name")
        digests = [key.sha256 for key in self.keys if key.sha256 is not None]
        variables = [key.key.strip("${}") for key in self.keys if key.key is not None]
        if len(set(digests)) < len(digests) or len(set(variables)) < len(variables):
            raise ValueError("api.keys: the same key is given twice (a key acts for one person)")
        return self


class ScopeLimits(Section):
    """USD limits of one kind of scope per window (day and month in scheduler.timezone)."""

    daily_usd: StrictFloat | None = Field(
        None, ge=0, description="USD per day (midnight to midnight in scheduler.timezone); null = no limit."
    )
    monthly_usd: StrictFloat | None = Field(
        None, ge=0, description="USD per calendar month in scheduler.timezone; null = no limit."
    )


class CronLimits(ScopeLimits):
    """The limits of each scheduled job: per run, and per day and month like the other scopes."""

    per_run_usd: StrictFloat | None = Field(
        None, ge=0, description="USD one run of a job may spend: the run stops before its limit; null = none."
    )


class LimitOverride(Section):
    """The limits of one chat, person or job: a key given here replaces the scope's default; an explicit
    null lifts that limit."""

    daily_usd: StrictFloat | None = Field(None, ge=0)
    monthly_usd: StrictFloat | None = Field(None, ge=0)
    per_run_usd: StrictFloat | None = Field(None, ge=0)

    def given(self) -> dict[str, float | None]:
        """The limits this override sets (an explicit null included), by field name."""
        return {name: getattr(self, name) for name in self.model_fields_set}


OVERRIDE_KEY = re.compile(r"[a-z][a-z0-9_]*:\S+")


class BudgetSettings(Section):
    """Spend limits in USD, priced from the model table with its cache prices. Checked before every model
    request (turns, tool rounds, sub-agents, reviews, compression, cron); null everywhere = no limits."""

    bot: ScopeLimits = Field(default_factory=ScopeLimits, description="The whole bot, every chat and job.")
    chat: ScopeLimits = Field(
        default_factory=ScopeLimits, description="Each chat (each forum topic; the terminal is one chat)."
    )
    person: ScopeLimits = Field(
        default_factory=ScopeLimits,
        description="Each person (platform:user_id), over every chat they write in.",
    )
    cron: CronLimits = Field(default_factory=CronLimits, description="Each scheduled job.")
    overrides: dict[str, LimitOverride] = Field(
        default_factory=dict,
        description=f'Limits of particular chats, people or jobs, e.g. {{"{EXAMPLE}:-100123": {{daily_usd: '
        f"5}}}}: keys are platform:chat_id (platform:chat_id:thread_id for a topic, or a session key such as "
        f"{chat_session_key(ChatAddress(EXAMPLE, '-100123'), direct=False)}), platform:user_id for a person, "
        f"{job_session_key('JOB_ID')} for a job; a key platform:id "
        "applies to the chat and to the person with that id. An explicit null lifts a limit.",
    )
    warn_at: StrictFloat | None = Field(
        0.8,
        gt=0,
        le=1,
        description="Share of a limit at which the admins get one direct message per scope and window; "
        "null = no warnings.",
    )
    exempt_admins: StrictBool = Field(
        True,
        description="Requests on behalf of gateway.admins are never refused (their spend still counts): "
        "the limits protect the owner's wallet from others, and must not lock the owner out.",
    )

    @field_validator("overrides")
    @classmethod
    def _override_keys(cls, value: dict[str, LimitOverride]) -> dict[str, LimitOverride]:
        for key in value:
            if not OVERRIDE_KEY.fullmatch(key):
                raise ValueError(
                    f"'{key}' is not platform:chat_id, platform:user_id or cron:JOB_ID "
                    f"(e.g. {EXAMPLE}:-100123)"
                )
        return value


BOT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
EXAMPLE_TOKEN = PLATFORMS[0].token.env  # the variable examples name: the first platform's token
PROCESS_SECTIONS = frozenset({"bots", "console", "api"})  # one per process: never in a bot's settings
PROCESS_GATEWAY_KEYS = frozenset({"http_host", "http_port"})  # the one HTTP server's address


class BotSettings(Section):
    """One bot of several served by one process (see docs/several-bots.md)."""

    tokens: dict[str, str] = Field(
        default_factory=dict,
        description="The bot's platform variables, each as $NAME read from the environment or .env, e.g. "
        f"{{{EXAMPLE_TOKEN}: $FAMILY_{EXAMPLE_TOKEN}}}: a platform is enabled for the bot when its token is "
        f"here (the top-level {EXAMPLE_TOKEN} and the like are not used by bots).",
    )
    profile: str | None = Field(
        None,
        description="Directory of the bot's SOUL.md, memories/ and skills/, relative to HERALD_HOME: null = "
        "bots/NAME (its own); two bots naming one directory share them; '.' = the home's own.",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Config sections that differ for this bot, merged over the top-level ones (same keys), "
        f"e.g. {{model: {{name: claude-haiku-4-5}}, budgets: {{bot: {{daily_usd: 2}}}}, {EXAMPLE}: "
        "{allowed_users: [12345]}}; not console, api or gateway.http_host/http_port (one per process).",
    )

    @field_validator("tokens")
    @classmethod
    def _platform_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        known = platform_variables()
        for name in value:
            if name not in known:
                raise ValueError(f"'{name}' is not a platform's variable (one of {', '.join(sorted(known))})")
        return value

    def literal_secrets(self) -> list[str]:
        """The variables of ``tokens`` given as a value instead of ``$NAME`` (checked where the value is
        not shown: it is a secret)."""
        return [name for name, reference in self.tokens.items() if not reference.startswith("$")]

    @field_validator("profile")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None and (Path(value).is_absolute() or ".." in Path(value).parts):
            raise ValueError("must be a directory inside HERALD_HOME (relative, without '..')")
        return value

    @field_validator("settings")
    @classmethod
    def _bot_sections(cls, value: dict[str, Any]) -> dict[str, Any]:
        for section in value:
            if section in PROCESS_SECTIONS:
                raise ValueError(f"'{section}' is one per process: set it at the top level, not for one bot")
        gateway = value.get("gateway")
        if isinstance(gateway, dict) and (shared := PROCESS_GATEWAY_KEYS & gateway.keys()):
            raise ValueError(f"gateway.{min(shared)} is the process's HTTP server: set it at the top level")
        return value


def key_bot_problem(key: ApiKey, bots: Sequence[str]) -> str | None:
    """What is wrong with the bot an API key names, given the configured ``bots`` (none: one bot)."""
    if not bots:
        if key.bot is None:
            return None
        return f"names bot {key.bot} but there is no bots: section; remove its bot: (the one bot answers)"
    known = ", ".join(bots)
    if key.bot is None:
        return f"with bots:, each key says which bot it talks to: add bot: (one of {known})"
    if key.bot not in bots:
        return f"names bot {key.bot}, which is not in bots: (bots: {known})"
    return None


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: mappings key by key, anything else (a list too) replaced."""
    result = dict(base)
    for key, value in over.items():
        below = result.get(key)
        result[key] = merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return result


CLUSTER_NEEDS_POSTGRESQL = (
    "cluster.redis_url is set but storage.url is not PostgreSQL: every process of a cluster must see the "
    "same state (set storage.url: postgresql://..., see docs/storage.md)"
)


class HeraldConfig(Section):
    model: ModelSettings = ModelSettings()
    storage: StorageSettings = StorageSettings()
    prompt_caching: PromptCachingSettings = PromptCachingSettings()
    compression: CompressionSettings = CompressionSettings()
    auxiliary: AuxiliarySettings = AuxiliarySettings()
    context: ContextSettings = ContextSettings()
    memory: MemorySettings = MemorySettings()
    agent: AgentSection = AgentSection()
    delegate: DelegateSettings = DelegateSettings()
    review: ReviewSettings = ReviewSettings()
    media: MediaSettings = MediaSettings()
    stt: SpeechToTextSettings = SpeechToTextSettings()
    tts: TextToSpeechSettings = TextToSpeechSettings()
    web: WebSettings = WebSettings()
    mcp: McpSettings = McpSettings()
    tools: ToolsSettings = ToolsSettings()
    gateway: GatewaySettings = GatewaySettings()
    # Each platform's section, as its spec declares it (``adapters.registry``), in the registry's order:
    # ``telegram:``, ``discord:``... are keys of this schema like the others.
    __annotations__.update({spec.name: spec.settings for spec in PLATFORMS})
    locals().update({spec.name: spec.settings() for spec in PLATFORMS})
    scheduler: SchedulerSettings = SchedulerSettings()
    cluster: ClusterSettings = ClusterSettings()
    console: ConsoleSettings = ConsoleSettings()
    api: ApiSettings = ApiSettings()
    budgets: BudgetSettings = BudgetSettings()
    bots: dict[str, BotSettings] = Field(
        default_factory=dict,
        description="Several bots served by one process, by name (a-z, 0-9, - and _): each with its platform "
        f"tokens, its profile and its own settings, e.g. {{family: {{tokens: {{{EXAMPLE_TOKEN}: "
        f"$FAMILY_{EXAMPLE_TOKEN}}}}}}}; sessions, memory, jobs and spending never cross between them. "
        "{} = one bot, configured by the top level.",
    )
    models: dict[str, ModelOverride] = Field(
        default_factory=dict,
        description="Per-model overrides of the built-in table (prices in USD per million tokens), e.g. "
        "my-local-model: {context_length: 32768, min_cache_tokens: 1024, input: 0, output: 0, vision: true} "
        "(vision: takes images; pdf: takes PDFs natively, else their text is sent).",
    )

    @model_validator(mode="after")
    def _cluster_needs_a_shared_database(self) -> HeraldConfig:
        """What the file shows; a ``$NAME`` is checked once resolved (``gateway.wiring.runtime``)."""
        url = self.storage.url
        if self.cluster.redis_url is not None and (url is None or url.startswith("sqlite")):
            raise ValueError(CLUSTER_NEEDS_POSTGRESQL)
        return self

    @model_validator(mode="after")
    def _bots_compose(self) -> HeraldConfig:
        """Each bot's settings make a valid configuration with the top level's (checked at load, so a bad
        one is an error in ``config.yaml``, not at start)."""
        for index, key in enumerate(self.api.keys):
            if problem := key_bot_problem(key, list(self.bots)):
                raise ValueError(f"api.keys[{index}] ({key.label}): {problem}")
        for name in self.bots:
            if not BOT_NAME.fullmatch(name):
                raise ValueError(f"bots: '{name}' is not a bot name (a-z first, then a-z, 0-9, - or _)")
            if literal := self.bots[name].literal_secrets():
                raise ValueError(
                    f"bots.{name}.tokens.{literal[0]} must be $NAME (a variable of the environment or .env): "
                    "a secret never goes in config.yaml"
                )
            self.bot(name)
        return self

    def bot(self, name: str) -> HeraldConfig:
        """The configuration bot ``name`` runs with: the top level with its ``settings`` merged over it, and
        the API settings with only the keys that talk to it (so its access rules know their people)."""
        base = self.model_dump(exclude_unset=True, exclude=set(PROCESS_SECTIONS))
        api = self.api.model_dump(exclude_unset=True, exclude={"keys"})
        own = [key for key in self.api.keys if key.bot == name]
        api["keys"] = [key.model_dump(exclude_unset=True, exclude={"bot"}) for key in own]
        base["api"] = api
        try:
            return HeraldConfig.model_validate(merged(base, self.bots[name].settings))
        except ValidationError as error:
            problems = format_validation_error(error, f"bots.{name}.settings").splitlines()[1:]
            raise ValueError(f"bots.{name}.settings: " + "; ".join(p.strip(" -") for p in problems)) from None

    def platform_settings(self, spec: PlatformSpec[S]) -> S:
        """The section of ``spec``'s platform."""
        section = getattr(self, spec.name)
        if not isinstance(section, spec.settings):
            raise TypeError(f"config.{spec.name} is a {type(section).__name__}, not {spec.settings.__name__}")
        return section

    def model_info(self, name: str | None = None) -> ModelInfo:
        """Table entry for ``name`` (default: the configured model) with config overrides applied."""
        name = name or self.model.name
        base = lookup_model(name)
        override = self.models.get(name)
        if override is not None:
            values = {k: v for k, v in override.model_dump().items() if v is not None}
            base = ModelInfo(**{**base.__dict__, **values})
        # model.context_length describes the configured model, not sessions built for other models.
        return with_context_length(base, self.model.context_length if name == self.model.name else None)


def format_validation_error(error: ValidationError, source: str) -> str:
    lines = [f"{source} has {error.error_count()} invalid setting(s):"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        if not key:  # a rule about several settings together
            lines.append(f"  - {item['msg'].removeprefix('Value error, ')}")
        elif item["type"] == "extra_forbidden":
            lines.append(f"  - {key}: unknown key (check the spelling; see config/config.yaml for every key)")
        else:
            found = _without_password(item.get("input"))
            lines.append(f"  - {key} = {found!r}: {item['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def _without_password(value: object) -> object:
    """A refused value as it may be shown: a URL's password (``postgresql://u:PASSWORD@h/db``) hidden."""
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", value) if isinstance(value, str) else value


def validate(data: object, source: str) -> HeraldConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must be a mapping of settings, found {type(data).__name__}.")
    try:
        return HeraldConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source)) from None


def _read(path: Path) -> str:
    try:
        return read_text(path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def _not_yaml(path: Path, error: Exception) -> ConfigError:
    if isinstance(error, DuplicateKey):
        return ConfigError(f"{path}: {error}.")
    return ConfigError(f"{path} is not valid YAML: {error}")


def _parse_file(path: Path) -> Any:
    """The plain data of ``path`` (``get`` and ``set`` report a broken file the same way); a key given
    twice is refused with both its lines."""
    try:
        return load_yaml(_read(path))
    except yaml.YAMLError as exc:
        raise _not_yaml(path, exc) from None


def load_config(path: Path) -> HeraldConfig:
    """Read and validate ``path``; a missing file means all defaults."""
    if not path.exists():
        return HeraldConfig()
    return validate(_parse_file(path), str(path))


def get_value(config: HeraldConfig, key: str) -> Any:
    """The effective value (defaults included) at a dotted key."""
    value: Any = config.model_dump(mode="json")
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"unknown key '{key}' (no '{part}' there)")
        value = value[part]
    return value


def format_value(value: Any) -> str:
    """A value as ``get`` and ``set`` print it: text as is, anything else as JSON (null, true, [..])."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def field_type(key: str) -> Any | None:
    """The schema's type of a dotted key (``models.NAME.input`` included); None for unknown keys."""
    annotation: Any = HeraldConfig
    for part in key.split("."):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part)
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    return annotation


def _options(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a type: ``str | None`` → (str, NoneType); Annotated is unwrapped."""
    if get_origin(annotation) is Annotated:
        return _options(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(option for arg in get_args(annotation) for option in _options(arg))
    return (annotation,)


def _is_text(option: Any) -> bool:
    if get_origin(option) is Literal:
        return all(isinstance(choice, str) for choice in get_args(option))
    return option in (str, Path)


def parse_value(key: str, raw: str) -> Any:
    """The value ``raw`` (as typed on the command line) stands for at ``key``, by the key's schema type.

    A text key takes the text exactly as given ("Answer in French: always.", "yes", "# x"); ``null``
    clears one that may be empty. Numbers and booleans are read as YAML scalars (the schema then
    refuses ``true`` for a number), lists and mappings as YAML or JSON. Unknown keys are read as YAML
    and refused by validation with the usual message.
    """
    options = _options(field_type(key))
    if any(_is_text(option) for option in options):
        return None if raw == "null" and type(None) in options else raw
    try:
        return load_yaml(raw)
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise ConfigError(f"cannot set '{key}': {raw!r} is not valid YAML or JSON ({problem})") from None


def _round_trip() -> YAML:
    handler = YAML()
    handler.preserve_quotes = True
    handler.indent(mapping=2, sequence=4, offset=2)
    return handler


def set_value(path: Path, key: str, raw: str) -> HeraldConfig:
    """Set ``key`` to ``raw`` (see :func:`parse_value`) in ``path``; comments and order survive.

    The whole file is validated with the new value before anything is written. A file that is not
    valid YAML is reported as ``load_config`` reports it (it cannot be edited without losing it).
    """
    handler = _round_trip()
    document: Any = None
    if path.exists():
        _parse_file(path)
        try:
            document = handler.load(_read(path))
        except RoundTripYAMLError as exc:
            raise _not_yaml(path, exc) from None
    if document is None:
        document = CommentedMap()
    if not isinstance(document, dict):
        raise ConfigError(f"{path} must be a mapping of settings, found {type(document).__name__}.")
    value = parse_value(key, raw)
    parts = key.split(".")
    node = document
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = CommentedMap()
            node[part] = child
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set '{key}': '{part}' holds a value, not a section")
        node = child
    node[parts[-1]] = value
    plain = yaml.safe_load(_dump(handler, document))
    config = validate(plain, f"{path} (after setting {key})")
    _atomic_write(path, _dump(handler, document))
    return config


def _dump(handler: YAML, document: Any) -> str:
    buffer = io.StringIO()
    handler.dump(document, buffer)
    return buffer.getvalue()


def _atomic_write(path: Path, text: str) -> None:
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
