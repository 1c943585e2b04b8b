"""HERALD_HOME: where configuration, secrets, identity, memory, skills and the database live.

The home is private (``agent.files.private``): created 0700, its files 0600, since it holds chat history,
memory about people and API keys.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dotenv import dotenv_values

from adapters.registry import PLATFORMS, platform_variables
from agent.files import PRIVATE_FILE, create_private_file, loose_permissions, make_private_dirs, read_text
from gateway.config_doc import render_config_yaml


def _platform_lines() -> str:
    """A commented line per variable each registered platform reads, its purpose above it."""
    lines = []
    for spec in PLATFORMS:
        for secret in (spec.token, *spec.secrets):
            lines += [f"# {spec.title}: {secret.purpose}", f"# {secret.env}="]
    return "\n".join(lines)


ENV_TEMPLATE = f"""\
# Secrets for Herald. Values already set in the environment win over this file.
# Remove the # before a line you fill in.

# The model provider (the key of the one in model.provider is enough):
# ANTHROPIC_API_KEY=
# OPENAI_API_KEY=
# ANTHROPIC_BASE_URL=
# OPENAI_BASE_URL=

# Chat platforms for `herald gateway run` (each is enabled when its token is set):
{_platform_lines()}

# web_search (web.search.provider: brave or tavily):
# BRAVE_API_KEY=
# TAVILY_API_KEY=
"""


@dataclass(frozen=True)
class HeraldHome:
    """``HERALD_HOME``. A bot of several (``bots:``, ``gateway.bots``) sees the same home with its own
    ``state`` directory (its database) and ``profile`` directory (SOUL.md, memories, skills); both are
    the root itself when there is one bot."""

    root: Path
    state: Path | None = None  # where state.db lives; None: the root
    profile: Path | None = None  # where SOUL.md, memories/ and skills/ live; None: the root
    bot: str | None = None  # the bot of ``bots:`` whose settings apply; None: the top level's

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def env_path(self) -> Path:
        return self.root / ".env"

    @property
    def soul_path(self) -> Path:
        return (self.profile or self.root) / "SOUL.md"

    @property
    def memories_dir(self) -> Path:
        return (self.profile or self.root) / "memories"

    @property
    def skills_dir(self) -> Path:
        return (self.profile or self.root) / "skills"

    @property
    def db_path(self) -> Path:
        return (self.state or self.root) / "state.db"


def resolve_home(environ: Mapping[str, str] | None = None) -> HeraldHome:
    environ = os.environ if environ is None else environ
    raw = environ.get("HERALD_HOME") or "~/.herald"
    return HeraldHome(Path(raw).expanduser())


def default_text(package: str, name: str) -> str:
    return (resources.files(package) / "defaults" / name).read_text(encoding="utf-8")


def ensure_home(home: HeraldHome) -> list[Path]:
    """Create whatever is missing, with defaults, privately. Never overwrites a file; returns what it
    created."""
    created: list[Path] = []
    for directory in (home.root, home.db_path.parent, home.memories_dir, home.skills_dir):
        created.extend(make_private_dirs(directory))
    files = {
        home.config_path: render_config_yaml(),
        home.soul_path: default_text("agent", "SOUL.md"),
        home.env_path: ENV_TEMPLATE,
        home.memories_dir / "MEMORY.md": "",
        home.memories_dir / "USER.md": "",
    }
    created.extend(path for path, text in files.items() if create_private_file(path, text))
    if home.env_path.is_file() and loose_permissions(home.env_path):  # secrets: tightened in an older home
        home.env_path.chmod(PRIVATE_FILE)  # only then: a private .env on a read-only home is left alone
    return created


def load_env(home: HeraldHome, environ: MutableMapping[str, str] | None = None) -> None:
    """Load ``.env`` into the environment; a variable set in the environment wins.

    A variable set to the empty string counts as unset: ``ANTHROPIC_API_KEY=`` left in a shell
    profile must not hide the key in ``.env``. The file is read as UTF-8, bad bytes replaced.
    """
    environ = os.environ if environ is None else environ
    if not home.env_path.exists():
        return
    foreign = platform_variables() if home.bot is not None else frozenset()  # a bot's come from its tokens
    for key, value in dotenv_values(stream=io.StringIO(read_text(home.env_path))).items():
        if value and not environ.get(key) and key not in foreign:
            environ[key] = value


def from_environment(
    value: str, what: str, home: HeraldHome, environ: Mapping[str, str] | None = None
) -> str:
    """``value`` itself, or for ``$NAME`` (``${NAME}``) the variable's value: how a setting names a secret
    kept in the environment or ``.env``. A variable that is not set is a ConfigError naming ``what``."""
    if not value.startswith("$"):
        return value
    name = value[1:].strip("{}")
    found = (os.environ if environ is None else environ).get(name)
    if not found:
        from gateway.config import ConfigError  # config imports nothing of the home's

        raise ConfigError(
            f"{what} is ${name} but {name} is not set: put it in the environment or in {home.env_path}."
        )
    return found
