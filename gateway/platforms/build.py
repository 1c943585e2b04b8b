"""The adapters of this process: one per registered platform whose token is set.

A platform's spec says everything (``adapters.spec.PlatformSpec``): its settings are its section of
the config, its secrets come from the environment (or HERALD_HOME/.env), and a platform that keeps
records gets a store in the gateway's database (``gateway.platforms.records``), so what it recorded
outlives a restart and is shared by the processes of a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.base import Adapter
from adapters.registry import PLATFORMS
from adapters.spec import BuildContext, PlatformSpec
from agent.db import Storage
from gateway.commands import private_commands
from gateway.config import ConfigError, HeraldConfig
from gateway.home import HeraldHome
from gateway.platforms.records import StoredRecords


def enabled(environ: Mapping[str, str]) -> list[PlatformSpec[Any]]:
    """The registered platforms whose token ``environ`` has."""
    return [spec for spec in PLATFORMS if spec.enabled(environ)]


def build_adapters(config: HeraldConfig, environ: Mapping[str, str], storage: Storage) -> list[Adapter]:
    """An adapter for every enabled platform (its SDK imported now, not before). A platform that
    cannot be built from what is configured stops the start with a :class:`ConfigError` naming it."""
    adapters: list[Adapter] = []
    for spec in enabled(environ):
        records = StoredRecords(storage, spec.name, spec.records) if spec.records is not None else None
        context = BuildContext(
            settings=config.platform_settings(spec),
            secrets=spec.secrets_in(environ),
            records=records,
            private_commands=private_commands(),
            admins=admins_on(config, spec.name),
        )
        try:
            adapters.append(spec.build(context))
        except ValueError as error:
            raise ConfigError(f"{spec.title} cannot be set up: {error}") from None
    return adapters


def admins_on(config: HeraldConfig, platform: str) -> frozenset[str]:
    """The user ids ``gateway.admins`` names on ``platform`` (``platform:id`` entries)."""
    prefix = f"{platform}:"
    admins = config.gateway.admins
    return frozenset(entry.removeprefix(prefix) for entry in admins if entry.startswith(prefix))


def token_names(specs: Sequence[PlatformSpec[Any]] = PLATFORMS) -> str:
    """``A, B or C``: the variables that enable ``specs``."""
    names = [spec.token.env for spec in specs]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def no_platform(home: HeraldHome) -> ConfigError:
    return ConfigError(
        f"No chat platform is enabled: set {token_names()} in the environment or in {home.env_path}, "
        "or give the OpenAI-compatible API a key (api.keys)."
    )
