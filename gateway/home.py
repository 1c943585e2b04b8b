"""HERALD_HOME: where configuration, secrets, identity, memory, skills and the database live."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dotenv import load_dotenv

from gateway.config_doc import render_config_yaml

ENV_TEMPLATE = """\
# Secrets for Herald. Values already set in the environment win over this file.
# ANTHROPIC_API_KEY=
# OPENAI_API_KEY=
# ANTHROPIC_BASE_URL=
# OPENAI_BASE_URL=
"""


@dataclass(frozen=True)
class HeraldHome:
    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def env_path(self) -> Path:
        return self.root / ".env"

    @property
    def soul_path(self) -> Path:
        return self.root / "SOUL.md"

    @property
    def memories_dir(self) -> Path:
        return self.root / "memories"

    @property
    def skills_dir(self) -> Path:
        return self.root / "skills"

    @property
    def db_path(self) -> Path:
        return self.root / "state.db"


def resolve_home(environ: Mapping[str, str] | None = None) -> HeraldHome:
    environ = os.environ if environ is None else environ
    raw = environ.get("HERALD_HOME") or "~/.herald"
    return HeraldHome(Path(raw).expanduser())


def default_text(package: str, name: str) -> str:
    return (resources.files(package) / "defaults" / name).read_text(encoding="utf-8")


def ensure_home(home: HeraldHome) -> list[Path]:
    """Create whatever is missing, with defaults. Never overwrites a file; returns what it created."""
    created: list[Path] = []
    for directory in (home.root, home.memories_dir, home.skills_dir):
        if not directory.exists():
            directory.mkdir(parents=True)
            created.append(directory)
    files = {
        home.config_path: render_config_yaml(),
        home.soul_path: default_text("agent", "SOUL.md"),
        home.env_path: ENV_TEMPLATE,
        home.memories_dir / "MEMORY.md": "",
        home.memories_dir / "USER.md": "",
    }
    for path, text in files.items():
        try:
            with path.open("x", encoding="utf-8") as handle:  # "x": fails if it exists, no race
                handle.write(text)
        except FileExistsError:
            continue
        created.append(path)
    home.env_path.chmod(0o600)
    return created


def load_env(home: HeraldHome) -> None:
    """Load ``.env`` into the environment without overriding variables already set."""
    if home.env_path.exists():
        load_dotenv(home.env_path, override=False)
