"""The bots one process serves: for each, its configuration, its corner of the home and its environment.

A bot is what one gateway was before there were several: its own database (sessions, inbox, outbox,
pairings, cron jobs, spending, adapters' records), its own SOUL.md, memory and skills (a profile, shared
only when two bots name the same directory), its own platform tokens and its own settings. So identity
flows by construction: nothing is namespaced by a bot column that a query could forget, and the gateway
opens one chat core per bot (``gateway.app``). Without ``bots:`` there is one bot, the home and the
configuration exactly as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adapters.registry import PLATFORMS, platform_variables
from agent.files import create_private_file, make_private_dirs
from gateway.config import EXAMPLE_TOKEN, ConfigError, HeraldConfig, load_config
from gateway.home import HeraldHome, default_text, from_environment
from gateway.home.database import storage_url

BOTS_DIR = "bots"  # HERALD_HOME/bots/NAME/: a bot's state.db, and its profile unless it names another


@dataclass(frozen=True)
class BotProfile:
    """One bot as the gateway opens it. ``name`` is None for the one bot of a home without ``bots:``."""

    name: str | None
    config: HeraldConfig
    home: HeraldHome
    environ: Mapping[str, str]

    @property
    def label(self) -> str:
        """How logs and the doctor name the bot ("" for the only one)."""
        return f"bot {self.name}" if self.name else ""


def bot_home(home: HeraldHome, name: str, profile: str | None) -> HeraldHome:
    """The home as bot ``name`` sees it: state in ``bots/NAME``, SOUL.md, memory and skills in its
    profile directory (``bots/NAME`` unless ``profile`` names another; "." is the home's own)."""
    state = home.root / BOTS_DIR / name
    return HeraldHome(home.root, state=state, profile=(home.root / profile) if profile else state, bot=name)


def chosen_bot(home: HeraldHome, name: str, environ: Mapping[str, str]) -> HeraldHome:
    """The home as bot ``name`` of ``config.yaml``'s ``bots:`` sees it (``herald --bot NAME``); a name
    that is not there is a ConfigError listing those that are."""
    config = load_config(home.config_path)
    settings = config.bots.get(name)
    if settings is None:
        known = ", ".join(config.bots) or "none"
        raise ConfigError(f"{home.config_path} has no bot '{name}' in bots: (bots: {known}).")
    require_own_state(config, home, environ)
    return bot_home(home, name, settings.profile)


def bot_environ(
    environ: Mapping[str, str], tokens: Mapping[str, str], home: HeraldHome, name: str
) -> dict[str, str]:
    """The process's environment without any platform's variable, plus the bot's own ``tokens``
    (``$NAME`` resolved; one that is not set is a ConfigError naming it)."""
    kept = {key: value for key, value in environ.items() if key not in platform_variables()}
    for variable, reference in tokens.items():
        kept[variable] = from_environment(reference, f"bots.{name}.tokens.{variable}", home, environ)
    return kept


def require_platform(name: str, environ: Mapping[str, str], config: HeraldConfig) -> None:
    """A bot is reached on at least one platform or through the API (a key naming it, in its ``config``):
    one without either is a mistake (a ConfigError)."""
    if not any(spec.enabled(environ) for spec in PLATFORMS) and not config.api.keys:
        raise ConfigError(
            f"bot {name} has no platform: give it a token in bots.{name}.tokens "
            f"(e.g. {EXAMPLE_TOKEN}: ${name.upper()}_{EXAMPLE_TOKEN}) or an API key (api.keys with "
            f"bot: {name})."
        )


def bot_profiles(config: HeraldConfig, home: HeraldHome, environ: Mapping[str, str]) -> list[BotProfile]:
    """The bots this process serves, in config order; two that would share a database are refused."""
    if not config.bots:
        return [BotProfile(None, config, home, environ)]
    profiles = [
        BotProfile(
            name,
            config.bot(name),
            bot_home(home, name, settings.profile),
            bot_environ(environ, settings.tokens, home, name),
        )
        for name, settings in config.bots.items()
    ]
    for profile in profiles:
        require_platform(str(profile.name), profile.environ, profile.config)
    require_own_state(config, home, environ)
    return profiles


TOP_LEVEL = "the top level"  # how refusals name the home's own state (herald without --bot uses it)


def require_own_state(config: HeraldConfig, home: HeraldHome, environ: Mapping[str, str]) -> None:
    """Each bot's sessions, jobs and spending are its database's: two bots on one database (or one Redis
    database of a cluster), or a bot on the top level's, would read each other's: a ConfigError."""
    whose: list[tuple[str, HeraldConfig, HeraldHome]] = [(TOP_LEVEL, config, home)]
    for name, bot in config.bots.items():
        whose.append((f"bot {name}", config.bot(name), bot_home(home, name, bot.profile)))
    databases: dict[str, str] = {}
    redis: dict[str, str] = {}
    for who, settings, where in whose:
        database = storage_url(settings, where, environ).redacted  # one database, one text
        if (other := databases.setdefault(database, who)) != who:
            raise ConfigError(
                f"{other} and {who} would keep their state in one database ({database}): give each bot its "
                "own storage.url in its settings (each bot's sessions and jobs are its own; to keep a "
                "home's history for one bot, move its state.db to bots/NAME/state.db)."
            )
        raw = settings.cluster.redis_url
        if raw is None:
            continue
        resolved = from_environment(raw, f"{who}: cluster.redis_url", where, environ)
        if (other := redis.setdefault(resolved, who)) != who:
            raise ConfigError(
                f"{other} and {who} would share one Redis database: give each bot its own "
                "cluster.redis_url in its settings (redis://host:6379/1, /2...)."
            )


def prepare_profile(profile: BotProfile) -> None:
    """Create a bot's directories and default files when missing (never overwriting): its state
    directory, and its profile's SOUL.md, memories/ and skills/."""
    home = profile.home
    for directory in (home.db_path.parent, home.memories_dir, home.skills_dir):
        make_private_dirs(directory)
    defaults: dict[Path, str] = {
        home.soul_path: default_text("agent", "SOUL.md"),
        home.memories_dir / "MEMORY.md": "",
        home.memories_dir / "USER.md": "",
    }
    for path, text in defaults.items():
        create_private_file(path, text)
