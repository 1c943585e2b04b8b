"""One registration per platform: what the gateway reads to configure, build, check and admit it.

A platform is a folder, ``adapters/<name>/``, whose ``spec.py`` defines ``SPEC``, a
:class:`PlatformSpec`, listed once in ``adapters.registry.PLATFORMS``. The gateway reads nothing else
about a platform: its section of ``config.yaml`` (``settings``, composed into the schema under
``name``), the variables that enable and authenticate it (``token``, ``secrets``), how to build its
adapter (``build``), how ``herald doctor`` checks its token (``probe``), who may talk to it and when it
needs a mention (``access``), and whether it keeps records in the gateway's database (``records``).
How it renders text, whether it has threads, edits or a webhook route are facts of the adapter itself
(``Adapter.capabilities``, ``Adapter.webhook_path``, ``Adapter.prompt_hint``: see ``adapters.base``).

A spec module imports no platform SDK: the gateway reads every spec at start-up, also for the
platforms that are not enabled. ``build`` imports the adapter (and with it the SDK) when it is called.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from adapters.base import Adapter
from adapters.records import RecordsPolicy, RecordStore


class PlatformSettings(BaseModel):
    """A platform's section of ``config.yaml`` (``telegram:``, ``discord:``...): unknown keys are errors,
    like in every section. Its docstring heads the section in the commented ``config.yaml``, and each
    field's ``description`` explains the key there and in the settings table of docs/config.md."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


S = TypeVar("S", bound=PlatformSettings)


def ids_as_text(value: object) -> object:
    """For a ``mode="before"`` validator of a list of platform ids: YAML reads ``[12345]`` as numbers."""
    if not isinstance(value, list):
        return value
    return [str(item) if isinstance(item, int) and not isinstance(item, bool) else item for item in value]


@dataclass(frozen=True)
class Secret:
    """A variable of the environment (or HERALD_HOME/.env) that a platform reads: never in config.yaml."""

    env: str  # its name: TELEGRAM_BOT_TOKEN
    purpose: str  # one line for the .env template: what it is, where to get it


@dataclass(frozen=True)
class AccessRules:
    """Who may talk to the bot on one platform (besides ``gateway.admins``, approved pairings and
    ``gateway.allow_all``), and when a shared chat needs the bot addressed.

    ``users`` may talk anywhere; in a shared chat (never a direct one) everyone may talk when the chat
    (or, for a thread, its parent chat) is in ``chats`` or its server (a Discord guild, a Slack
    workspace) is in ``servers``. With ``require_mention`` a message in a shared chat is answered only
    when it is addressed to the bot (``InboundMessage.addressed``: a mention, a reply to the bot, a
    command, or a chat the adapter answers freely).
    """

    users: frozenset[str] = frozenset()
    chats: frozenset[str] = frozenset()
    servers: frozenset[str] = frozenset()
    require_mention: bool = True


@dataclass(frozen=True)
class TokenProbe:
    """One cheap authenticated request that says whether the platform accepts the token (``herald
    doctor``; the doctor makes it with a short timeout, so the check needs no SDK).

    HTTP 401, 403 and 404 mean refused; on 200, ``bot_name`` reads the bot's name from the JSON answer
    (None: the answer refuses the token, as Slack's ``{"ok": false}`` does). ``fix`` completes "refused
    TOKEN: ..." with what to do.
    """

    url: str
    bot_name: Callable[[Any], str | None]
    fix: str
    headers: Mapping[str, str] = field(default_factory=dict)
    method: Literal["GET", "POST"] = "GET"


class ProbeRefused(Exception):
    """A :class:`LoginProbe`'s server refused the credentials; the message says what to do."""


@dataclass(frozen=True)
class LoginProbe:
    """The doctor's check for a platform not reached over HTTP (email's IMAP and SMTP): ``check`` logs
    in within ``seconds`` and returns the bot's name, raises :class:`ProbeRefused` when the server
    refuses the credentials, and any ``OSError`` or ``TimeoutError`` when it cannot be reached. The
    platform's client library may be imported inside ``check``: it runs only for an enabled platform."""

    check: Callable[[float], Awaitable[str]]


@dataclass(frozen=True)
class BuildContext(Generic[S]):
    """What :attr:`PlatformSpec.build` gets from the gateway."""

    settings: S  # the platform's section of config.yaml
    secrets: Mapping[str, str]  # the spec's variables that are set (token first), values stripped
    records: RecordStore | None  # the platform's records in the gateway's database (spec.records)
    private_commands: frozenset[str]  # commands whose reply only the asker needs to see (ephemeral)
    admins: frozenset[str] = frozenset()  # this platform's user ids in gateway.admins (who may invite it)


@dataclass(frozen=True)
class PlatformSpec(Generic[S]):
    """A platform as the gateway knows it (see the module docstring)."""

    name: str  # "telegram": the InboundMessage.platform, the config section, session keys, admins' ids
    title: str  # "Telegram": how logs, the doctor and error messages name it
    settings: type[S]
    token: Secret  # set: the platform is enabled
    build: Callable[[BuildContext[S]], Adapter]  # imports the adapter and its SDK when called
    probe: Callable[[S, Mapping[str, str]], TokenProbe | LoginProbe]  # (settings, secrets)
    access: Callable[[S], AccessRules]
    secrets: tuple[Secret, ...] = ()  # more variables it reads, each optional unless build says so
    records: RecordsPolicy | None = None  # it keeps records (``adapters.records``) in the gateway's database

    def enabled(self, environ: Mapping[str, str]) -> bool:
        """Whether its token is set (not blank)."""
        return bool(environ.get(self.token.env, "").strip())

    def secrets_in(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Its variables that are set, token first, values stripped."""
        found = {secret.env: environ.get(secret.env, "").strip() for secret in (self.token, *self.secrets)}
        return {name: value for name, value in found.items() if value}
