"""Skills: folders of instructions under ``HERALD_HOME/skills`` that the model loads on demand.

Only an index (name, description, category) goes into the system prompt's stable layer, which is
shared by every chat of a bot, so the index must be byte-identical for the same skills on disk:
it is sorted, and nothing in it depends on file-system order or on the machine. Skill bodies and
their extra files are loaded later with the skill_view tool and appended to the conversation, never
spliced into the system prompt.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import yaml

from agent.injection import scan_for_injection

logger = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
DEFAULT_CATEGORY = "general"
MAX_SKILL_FILE_BYTES = 100 * 1024
VIEW_TOOL = "skill_view"


@dataclass(frozen=True)
class SkillInfo:
    """One skill as listed in the index; ``directory`` is the folder holding its SKILL.md."""

    name: str
    description: str
    category: str
    directory: Path


class SkillError(Exception):
    """A skill could not be read; the message is shown to the model or user and says what to do."""


@dataclass(frozen=True)
class _FrontMatter:
    """Parsed SKILL.md: the YAML header as a mapping and the text after it."""

    fields: dict[str, Any]
    body: str


def _one_line(value: str) -> str:
    """Collapse whitespace so that a value cannot break the one-line-per-skill index format."""
    return " ".join(value.split())


def split_front_matter(text: str) -> _FrontMatter:
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
        fields = yaml.safe_load(header)
    except yaml.YAMLError as exc:
        raise ValueError(f"the front matter is not valid YAML ({_one_line(str(exc))})") from exc
    if not isinstance(fields, dict):
        raise ValueError("the front matter must be a YAML mapping such as 'name: ...'")
    return _FrontMatter(fields=fields, body=body)


def _text_field(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"'{key}' must be text")
    return _one_line(str(value))


def default_category(relative_dir: PurePosixPath) -> str:
    """The folder above the skill folder (skills/devops/deploy -> "devops"), or "general" at top level."""
    return relative_dir.parts[-2] if len(relative_dir.parts) >= 2 else DEFAULT_CATEGORY


def _skill_files(skills_dir: Path) -> list[Path]:
    """Every SKILL.md below ``skills_dir`` in sorted path order; symlinked and hidden folders skipped."""
    found: list[Path] = []
    for root, dirs, files in os.walk(skills_dir, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if SKILL_FILE in files:
            found.append(Path(root) / SKILL_FILE)
    return sorted(found, key=lambda path: path.relative_to(skills_dir).parts)


def _parse_skill(skills_dir: Path, skill_file: Path) -> SkillInfo:
    """One SkillInfo, or ValueError naming the problem (the caller logs it and skips the file)."""
    relative_dir = PurePosixPath(skill_file.parent.relative_to(skills_dir).as_posix())
    if relative_dir == PurePosixPath("."):
        raise ValueError(f"it must be inside its own folder, e.g. {SKILL_FILE} -> my-skill/{SKILL_FILE}")
    try:
        text = skill_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"it could not be read as UTF-8 text ({exc})") from exc
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
        category=_text_field(fields, "category") or default_category(relative_dir),
        directory=skill_file.parent,
    )


def load_skills_index(skills_dir: Path) -> list[SkillInfo]:
    """All valid skills, sorted by (category, name); broken files are skipped with a logged warning."""
    if not skills_dir.is_dir():
        return []
    by_name: dict[str, SkillInfo] = {}
    for skill_file in _skill_files(skills_dir):
        try:
            skill = _parse_skill(skills_dir, skill_file)
        except ValueError as exc:
            logger.warning("Skipping skill %s: %s. Fix the file to make it available.", skill_file, exc)
            continue
        if skill.name in by_name:
            logger.warning(
                "Skipping skill %s: the name %r is already used by %s. Rename one of them.",
                skill_file,
                skill.name,
                by_name[skill.name].directory / SKILL_FILE,
            )
            continue
        by_name[skill.name] = skill
    return sorted(by_name.values(), key=lambda s: (s.category, s.name))


def format_skills_index(skills: list[SkillInfo]) -> str:
    """The skills section of the stable layer; "" when there are no skills.

    Sorted here too, so the bytes do not depend on the order the caller passes.
    """
    if not skills:
        return ""
    lines = [
        "# Skills",
        "",
        "Skills are instructions for specific kinds of tasks. Only names and descriptions are listed "
        f"here. Before starting a task that matches a skill, load its full instructions with the {VIEW_TOOL} "
        f"tool (name), and any file it refers to with {VIEW_TOOL} (name, path).",
    ]
    category: str | None = None
    for skill in sorted(skills, key=lambda s: (s.category, s.name)):
        if skill.category != category:
            category = skill.category
            lines += ["", f"## {category}"]
        lines.append(f"- {skill.name}: {skill.description}" if skill.description else f"- {skill.name}")
    return "\n".join(lines)


def _find_skill(skills_dir: Path, name: str) -> SkillInfo:
    skills = load_skills_index(skills_dir)
    for skill in skills:
        if skill.name == name:
            return skill
    if not skills:
        raise SkillError(f"Unknown skill '{name}': no skills are installed (looked in {skills_dir}).")
    available = ", ".join(sorted(skill.name for skill in skills))
    raise SkillError(f"Unknown skill '{name}'. Available skills: {available}. Use one of these exact names.")


def _is_inside(path: Path, directory: Path) -> bool:
    return path == directory or path.is_relative_to(directory)


def list_skill_files(directory: Path) -> list[str]:
    """Files of a skill folder other than its SKILL.md, as sorted relative POSIX paths.

    Hidden files and symlinks that lead outside the folder are left out: they cannot be read anyway.
    """
    base = directory.resolve()
    found: list[str] = []
    for root, dirs, files in os.walk(directory, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for file_name in files:
            path = Path(root) / file_name
            relative = path.relative_to(directory).as_posix()
            if file_name.startswith(".") or relative == SKILL_FILE:
                continue
            if path.is_symlink() and not _is_inside(path.resolve(), base):
                continue
            found.append(relative)
    return sorted(found)


def _files_note(skill: SkillInfo, files: list[str]) -> str:
    """The skill's other files, so the model can load them progressively; "" when there are none."""
    if not files:
        return ""
    listing = "\n".join(f"- {file}" for file in files)
    return f"Files in this skill (load one with {VIEW_TOOL}, name '{skill.name}' and its path):\n{listing}"


def _confined_path(skill: SkillInfo, path: str) -> Path:
    """The file ``path`` names inside the skill folder, or SkillError if it would leave the folder."""
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
    base = skill.directory.resolve()
    target = (skill.directory / path).resolve()
    if not _is_inside(target, base):
        raise SkillError(
            f"Path '{path}' resolves outside the folder of skill '{skill.name}' (through a symlink) "
            "and cannot be read."
        )
    return target


def _read_skill_file(skill: SkillInfo, path: str) -> str:
    target = _confined_path(skill, path)
    if not target.is_file():
        files = list_skill_files(skill.directory)
        listing = ", ".join(files) if files else f"none besides {SKILL_FILE}"
        raise SkillError(f"Skill '{skill.name}' has no file '{path}'. Its files: {listing}.")
    size = target.stat().st_size
    if size > MAX_SKILL_FILE_BYTES:
        raise SkillError(
            f"File '{path}' of skill '{skill.name}' is {-(-size // 1024):,} KB, over the "
            f"{MAX_SKILL_FILE_BYTES // 1024} KB limit of {VIEW_TOOL}; it is not meant to be loaded whole."
        )
    text = _decode_text(target.read_bytes())
    if text is None:
        raise SkillError(
            f"File '{path}' of skill '{skill.name}' is binary, not text, so {VIEW_TOOL} cannot show it."
        )
    return text


def _decode_text(data: bytes) -> str | None:
    """UTF-8 text, or None for binary data (NUL bytes or invalid UTF-8)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_skill(skills_dir: Path, name: str, path: str | None = None) -> str:
    """A skill's instructions (no ``path``) or one of its files; raises SkillError saying what to do.

    Without ``path``: the SKILL.md body without front matter, then the other files of the skill so the
    model can load them one at a time when it needs them.
    """
    skill = _find_skill(skills_dir, name)
    if path is not None:
        return _read_skill_file(skill, path)
    text = _read_skill_file(skill, SKILL_FILE)
    try:
        body = split_front_matter(text).body.strip()
    except ValueError as exc:  # changed on disk since the index was read
        raise SkillError(f"Skill '{name}' cannot be read: its {SKILL_FILE} is broken ({exc}).") from exc
    note = _files_note(skill, list_skill_files(skill.directory))
    return f"{body}\n\n{note}" if note else body
