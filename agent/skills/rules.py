"""The rules of skills, in one place for every backend: SKILL.md front matter, the index and its bytes,
which paths a skill may read, size caps and binary detection.

Everything here is a pure function of paths and bytes: no disk, no database. A library path is a
relative POSIX path inside the skill library (``devops/deploy/SKILL.md``); a skill is the folder that
holds a SKILL.md, and its category defaults to the folder above it.

Only the index (name, description, category) goes into the system prompt's stable layer, which is
shared by every chat of a bot, so :func:`format_skills_index` gives the same bytes for the same skills
whatever the backend, the machine or the order things were found in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import yaml

from agent.injection import scan_for_injection
from agent.yaml_text import load_yaml

SKILL_FILE = "SKILL.md"
DEFAULT_CATEGORY = "general"
MAX_SKILL_FILE_BYTES = 100 * 1024
VIEW_TOOL = "skill_view"
UNLISTED_FOLDERS = frozenset({"__pycache__"})


@dataclass(frozen=True)
class SkillInfo:
    """One skill as listed in the index; ``directory`` is its folder in the library (``devops/deploy``)."""

    name: str
    description: str
    category: str
    directory: str


@dataclass(frozen=True)
class SkillDocument:
    """A SKILL.md as a backend found it: its folder, and its bytes or why they could not be read."""

    directory: str
    data: bytes | None
    error: str = ""


@dataclass(frozen=True)
class SkillIndex:
    """The valid skills sorted by (category, name), and one line per SKILL.md that was left out."""

    skills: tuple[SkillInfo, ...]
    problems: tuple[str, ...] = ()

    def find(self, name: str) -> SkillInfo | None:
        return next((skill for skill in self.skills if skill.name == name), None)

    def at(self, directory: str) -> SkillInfo | None:
        return next((skill for skill in self.skills if skill.directory == directory), None)


class SkillError(Exception):
    """A skill could not be read or saved; the message is shown to the model or user and says what to do."""


@dataclass(frozen=True)
class FrontMatter:
    """Parsed SKILL.md: the YAML header as a mapping and the text after it."""

    fields: dict[str, Any]
    body: str


def _one_line(value: str) -> str:
    """Collapse whitespace so that a value cannot break the one-line-per-skill index format."""
    return " ".join(value.split())


def split_front_matter(text: str) -> FrontMatter:
    """Split ``---`` YAML front matter from the body; raises ValueError saying what is wrong."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise ValueError("it does not start with a '---' line opening the YAML front matter")
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() in ("---", "..."):
            header = "\n".join(lines[1:index])
            body = "\n".join(lines[index + 1 :])
            break
    else:
        raise ValueError("the YAML front matter has no closing '---' line")
    try:
        fields = load_yaml(header, first_line=2)  # the file's line numbers: "---" is line 1
    except yaml.YAMLError as exc:
        raise ValueError(f"the front matter is not valid YAML ({_one_line(str(exc))})") from exc
    if not isinstance(fields, dict):
        raise ValueError("the front matter must be a YAML mapping such as 'name: ...'")
    return FrontMatter(fields=fields, body=body)


def _text_field(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"'{key}' must be text")
    return _one_line(str(value))


def default_category(directory: str) -> str:
    """The folder above the skill folder (devops/deploy -> "devops"), or "general" at top level."""
    parts = PurePosixPath(directory).parts
    return parts[-2] if len(parts) >= 2 else DEFAULT_CATEGORY


def decode_text(data: bytes) -> str | None:
    """UTF-8 text, or None for binary data (NUL bytes or invalid UTF-8)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_skill(directory: str, data: bytes) -> SkillInfo:
    """The SkillInfo of the SKILL.md ``data`` in ``directory``, or ValueError naming the problem."""
    if directory in ("", "."):
        raise ValueError(f"it must be inside its own folder, e.g. {SKILL_FILE} -> my-skill/{SKILL_FILE}")
    text = decode_text(data)
    if text is None:
        raise ValueError("it could not be read as UTF-8 text")
    fields = split_front_matter(text).fields
    name = _text_field(fields, "name")
    if not name:
        raise ValueError("the front matter has no 'name'")
    description = _text_field(fields, "description")
    # The index goes into every chat's system prompt, and skills are installed from anywhere.
    findings = scan_for_injection(f"{name}\n{description}")
    if findings:
        raise ValueError(f"its name or description looks like a prompt injection ({findings[0]})")
    return SkillInfo(
        name=name,
        description=description,
        category=_text_field(fields, "category") or default_category(directory),
        directory=directory,
    )


def is_hidden(path: str) -> bool:
    """Whether any part of the library path starts with "." (hidden folders and files are not skills)."""
    return any(part.startswith(".") for part in PurePosixPath(path).parts)


def is_listed(relative: str) -> bool:
    """Whether a file of a skill is shown in its file list (not hidden, not in ``__pycache__``)."""
    parts = PurePosixPath(relative).parts
    return not is_hidden(relative) and not any(part in UNLISTED_FOLDERS for part in parts[:-1])


def skill_files(paths: Iterable[str]) -> list[str]:
    """A skill's files other than its SKILL.md, listed ones only, sorted."""
    return sorted(path for path in paths if path != SKILL_FILE and is_listed(path))


def build_index(documents: Iterable[SkillDocument], where: Callable[[str], str]) -> SkillIndex:
    """Every valid skill, sorted by (category, name). Documents are taken in path order, so of two
    skills with one name the first in path order wins; each one left out gets a line naming it
    (``where`` turns a library path into a name for people) and what to do."""
    by_name: dict[str, SkillInfo] = {}
    problems: list[str] = []
    ordered = sorted(documents, key=lambda document: (*PurePosixPath(document.directory).parts, SKILL_FILE))
    for document in ordered:
        if is_hidden(document.directory):
            continue
        location = where(f"{document.directory}/{SKILL_FILE}")
        try:
            if document.data is None:
                raise ValueError(f"it could not be read ({document.error})")
            skill = parse_skill(document.directory, document.data)
        except ValueError as exc:
            problems.append(f"Skipping skill {location}: {exc}. Fix the file to make it available.")
            continue
        if skill.name in by_name:
            first = where(f"{by_name[skill.name].directory}/{SKILL_FILE}")
            problems.append(
                f"Skipping skill {location}: the name {skill.name!r} is already used by {first}. "
                "Rename one of them."
            )
            continue
        by_name[skill.name] = skill
    skills = sorted(by_name.values(), key=lambda s: (s.category, s.name))
    return SkillIndex(tuple(skills), tuple(problems))


def format_skills_index(skills: Iterable[SkillInfo]) -> str:
    """The skills section of the stable layer; "" when there are no skills.

    Sorted here too, so the bytes do not depend on the order the caller passes.
    """
    ordered = sorted(skills, key=lambda s: (s.category, s.name))
    if not ordered:
        return ""
    lines = [
        "# Skills",
        "",
        "Skills are instructions for specific kinds of tasks. Only names and descriptions are listed "
        f"here. Before starting a task that matches a skill, load its full instructions with the {VIEW_TOOL} "
        f"tool (name), and any file it refers to with {VIEW_TOOL} (name, path).",
    ]
    category: str | None = None
    for skill in ordered:
        if skill.category != category:
            category = skill.category
            lines += ["", f"## {category}"]
        lines.append(f"- {skill.name}: {skill.description}" if skill.description else f"- {skill.name}")
    return "\n".join(lines)


def unknown_skill(name: str, index: SkillIndex) -> SkillError:
    """Where the library lives is not said: the model reads this, and a folder or a database URL is the
    owner's business (``herald skills list`` names it)."""
    if not index.skills:
        return SkillError(f"Unknown skill '{name}': no skills are installed.")
    available = ", ".join(sorted(skill.name for skill in index.skills))
    return SkillError(f"Unknown skill '{name}'. Available skills: {available}. Use one of these exact names.")


def confined(skill: SkillInfo, path: str) -> str:
    """``path`` as a clean relative POSIX path inside the skill's folder, or SkillError if it is empty,
    absolute or climbs out with "..". (A backend with symlinks checks where they lead.)"""
    if not path.strip():
        raise SkillError(f"The path is empty. Omit path to read {SKILL_FILE}, or pass a file of the skill.")
    if PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute() or path.startswith("~"):
        raise SkillError(
            f"Path '{path}' is absolute. Pass a path relative to the folder of skill '{skill.name}', "
            "e.g. 'references/api.md'."
        )
    if ".." in PurePosixPath(path.replace("\\", "/")).parts:
        raise SkillError(
            f"Path '{path}' leaves the folder of skill '{skill.name}' ('..' is not allowed). "
            "Pass a path inside the skill folder."
        )
    return PurePosixPath(path).as_posix()


def outside(skill: SkillInfo, path: str) -> SkillError:
    return SkillError(
        f"Path '{path}' resolves outside the folder of skill '{skill.name}' (through a symlink) "
        "and cannot be read."
    )


def missing(skill: SkillInfo, path: str, files: list[str]) -> SkillError:
    listing = ", ".join(files) if files else f"none besides {SKILL_FILE}"
    return SkillError(f"Skill '{skill.name}' has no file '{path}'. Its files: {listing}.")


def too_large(skill: SkillInfo, path: str, size: int) -> SkillError:
    return SkillError(
        f"File '{path}' of skill '{skill.name}' is {-(-size // 1024):,} KB, over the "
        f"{MAX_SKILL_FILE_BYTES // 1024} KB limit of {VIEW_TOOL}; it is not meant to be loaded whole."
    )


def binary(skill: SkillInfo, path: str) -> SkillError:
    return SkillError(
        f"File '{path}' of skill '{skill.name}' is binary, not text, so {VIEW_TOOL} cannot show it."
    )


def files_note(skill: SkillInfo, files: list[str]) -> str:
    """The skill's other files, so the model can load them progressively; "" when there are none."""
    if not files:
        return ""
    listing = "\n".join(f"- {file}" for file in files)
    return f"Files in this skill (load one with {VIEW_TOOL}, name '{skill.name}' and its path):\n{listing}"
