"""The skill library over a backend of files: the one API the tools, sessions and the CLI use.

:class:`SkillTree` is the seam: a tree of files (library path → bytes) with an atomic replacement of a
skill's folder and an atomic compare-and-set of one file. What a skill is, the index, which paths may
be read, caps and refusals are :mod:`agent.skills.rules`, shared by every backend. The backends:

- :class:`agent.skills.files.DiskSkillTree`: folders under ``HERALD_HOME/skills`` that people may edit
  by hand (the default, with SQLite).
- :class:`agent.skills.database.DatabaseSkillTree`: the ``skill_files`` table (with PostgreSQL).

Concurrency: any number of tasks and processes may read at once. A save or import of one skill is
atomic against readers (they see the folder before or after it) and against other writers; a save of
SKILL.md is refused when the file changed since it was read. The name check of a save and the write
are not one step: two people creating skills of one name at once get two skills, and the index keeps
the first in path order (and warns). Nothing is retried here.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.skills.rules import (
    MAX_SKILL_FILE_BYTES,
    SKILL_FILE,
    SkillDocument,
    SkillError,
    SkillIndex,
    SkillInfo,
    binary,
    build_index,
    confined,
    decode_text,
    files_note,
    format_skills_index,
    missing,
    outside,
    parse_skill,
    skill_files,
    split_front_matter,
    too_large,
    unknown_skill,
)

logger = logging.getLogger("agent.skills")

NEW_SKILL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class FileRead:
    """A file as a backend read it: its size, and its bytes unless they were over the asked limit."""

    size: int
    data: bytes | None


class OutsideSkill(Exception):
    """The path leads outside the skill's folder (a symlink, on disk)."""


class SkillChanged(Exception):
    """A compare-and-set found the file changed since it was read; nothing was written."""


class SkillTree(ABC):
    """The library's files. Library paths are relative POSIX paths; ``directory`` is a skill's folder."""

    description: str  # where the library lives, for people: a folder, or "the database (URL)"

    @abstractmethod
    def where(self, path: str) -> str:
        """A library path's name in messages for people (a file path on disk)."""

    @abstractmethod
    async def skill_documents(self) -> list[SkillDocument]:
        """Every SKILL.md in the library (any order; hidden folders may be left out)."""

    @abstractmethod
    async def files_under(self, directory: str) -> list[str]:
        """Every readable file below ``directory``, relative to it (any order)."""

    @abstractmethod
    async def read_file(self, directory: str, relative: str, limit: int) -> FileRead | None:
        """The file ``relative`` of the folder ``directory`` (None: no such file; data None: over
        ``limit`` bytes). OutsideSkill when it leads out of the folder."""

    @abstractmethod
    async def replace_folder(self, directory: str, files: Mapping[str, bytes], remove: Sequence[str]) -> None:
        """Atomically: delete the folders ``remove``, then make ``directory`` hold exactly ``files``
        (paths relative to it)."""

    @abstractmethod
    async def write_file(self, directory: str, relative: str, data: bytes, expected: bytes | None) -> None:
        """Atomically: write one file if it still holds ``expected`` (None: if it does not exist);
        SkillChanged otherwise."""


@dataclass(frozen=True)
class SkillDraft:
    """What ``herald skills edit`` starts from: the skill's SKILL.md text (a template for a new one)."""

    name: str
    directory: str
    text: str
    original: bytes | None  # the stored bytes (None: a new skill)


@dataclass(frozen=True)
class Bundle:
    """A skill to import: the folder it goes to in the library and its files (relative path → bytes)."""

    directory: str
    files: Mapping[str, bytes]
    source: str  # where it came from, for the report


@dataclass
class ImportReport:
    """One line per skill: imported, replaced or skipped (with why)."""

    imported: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class SkillLibrary:
    def __init__(self, tree: SkillTree) -> None:
        self.tree = tree

    @property
    def description(self) -> str:
        return self.tree.description

    async def index(self) -> SkillIndex:
        """Every valid skill and a line per SKILL.md left out (nothing is logged)."""
        return build_index(await self.tree.skill_documents(), self.tree.where)

    async def skills(self) -> list[SkillInfo]:
        """All valid skills, sorted by (category, name); each one left out is logged as a warning."""
        index = await self.index()
        for problem in index.problems:
            logger.warning("%s", problem)
        return list(index.skills)

    async def index_text(self) -> str:
        """The skills section of the stable prompt layer (``rules.format_skills_index``)."""
        return format_skills_index(await self.skills())

    async def find(self, name: str) -> SkillInfo:
        index = await self.index()
        skill = index.find(name)
        if skill is None:
            raise unknown_skill(name, index)
        return skill

    async def files(self, skill: SkillInfo) -> list[str]:
        """The skill's files other than SKILL.md, as sorted relative paths."""
        return skill_files(await self.tree.files_under(skill.directory))

    async def read(self, name: str, path: str | None = None) -> str:
        """A skill's instructions (no ``path``) or one of its files; raises SkillError saying what to do.

        Without ``path``: the SKILL.md body without front matter, then the other files of the skill so the
        model can load them one at a time when it needs them.
        """
        skill = await self.find(name)
        if path is not None:
            return await self._read_text(skill, path)
        text = await self._read_text(skill, SKILL_FILE)
        try:
            body = split_front_matter(text).body.strip()
        except ValueError as exc:  # changed since the index was read
            raise SkillError(f"Skill '{name}' cannot be read: its {SKILL_FILE} is broken ({exc}).") from exc
        note = files_note(skill, await self.files(skill))
        return f"{body}\n\n{note}" if note else body

    async def _read_text(self, skill: SkillInfo, path: str) -> str:
        relative = confined(skill, path)
        try:
            found = await self.tree.read_file(skill.directory, relative, MAX_SKILL_FILE_BYTES)
        except OutsideSkill:
            raise outside(skill, path) from None
        if found is None:
            raise missing(skill, path, await self.files(skill))
        if found.data is None:
            raise too_large(skill, path, found.size)
        text = decode_text(found.data)
        if text is None:
            raise binary(skill, path)
        return text

    # -- changing the library (the command line) ---------------------------------------------------

    async def draft(self, name: str) -> SkillDraft:
        """The SKILL.md of skill ``name`` to edit, or a template for a new skill in folder ``name``."""
        index = await self.index()
        skill = index.find(name)
        if skill is None:
            if not NEW_SKILL_NAME.fullmatch(name):
                raise SkillError(
                    f"There is no skill '{name}', and a new skill's name must be letters, digits, '.', "
                    "'_' or '-' (it names its folder)."
                )
            existing = await self.tree.read_file(name, SKILL_FILE, 0)
            if existing is not None:
                raise SkillError(
                    f"There is no skill '{name}', but the folder {self.tree.where(name)} already has a "
                    f"{SKILL_FILE} that is not indexed; fix it (herald skills list says why)."
                )
            template = f"---\nname: {name}\ndescription: \n---\n\n"
            return SkillDraft(name, name, template, None)
        text, data = await self._skill_file(skill)
        return SkillDraft(name, skill.directory, text, data)

    async def skill_text(self, name: str) -> tuple[SkillInfo, str]:
        """A skill and its whole SKILL.md text, front matter included (for people)."""
        skill = await self.find(name)
        return skill, (await self._skill_file(skill))[0]

    async def _skill_file(self, skill: SkillInfo) -> tuple[str, bytes]:
        found = await self.tree.read_file(skill.directory, SKILL_FILE, 1 << 30)
        text = decode_text(found.data) if found is not None and found.data is not None else None
        if found is None or found.data is None or text is None:
            raise SkillError(
                f"The {SKILL_FILE} of skill '{skill.name}' changed while it was read; try again."
            )
        return text, found.data

    async def save(self, draft: SkillDraft, text: str) -> str | None:
        """Store an edited SKILL.md; None when nothing changed. Refused (SkillError, nothing saved) when it
        does not parse, its name is another skill's, or the file changed since the draft was read."""
        if text == draft.text:
            return None
        data = text.encode("utf-8")
        try:
            info = parse_skill(draft.directory, data)
        except ValueError as exc:
            raise SkillError(f"{SKILL_FILE} of skill '{draft.name}' was not saved: {exc}.") from None
        other = (await self.index()).find(info.name)
        if other is not None and other.directory != draft.directory:
            raise SkillError(
                f"{SKILL_FILE} of skill '{draft.name}' was not saved: the name '{info.name}' is already used "
                f"by the skill in {self.tree.where(other.directory)}."
            )
        try:
            await self.tree.write_file(draft.directory, SKILL_FILE, data, draft.original)
        except SkillChanged:
            raise SkillError(
                f"{SKILL_FILE} of skill '{draft.name}' was changed by someone else while you were editing "
                "it; nothing was saved. Edit it again."
            ) from None
        verb = "Created" if draft.original is None else "Saved"
        return f"{verb} skill '{info.name}' ({self.tree.where(f'{draft.directory}/{SKILL_FILE}')})."

    async def install(self, bundles: Sequence[Bundle]) -> ImportReport:
        """Import skill folders: each replaces the library folder it goes to and any skill of the same
        name elsewhere, atomically per skill. One that does not parse, or repeats a name imported just
        before, is skipped with the reason."""
        report = ImportReport()
        index = await self.index()
        taken: dict[str, str] = {}
        for bundle in bundles:
            try:
                info = parse_skill(bundle.directory, bundle.files[SKILL_FILE])
            except ValueError as exc:
                report.skipped.append(f"{bundle.source}: {exc}")
                continue
            if info.name in taken:
                report.skipped.append(
                    f"{bundle.source}: the name '{info.name}' is also in {taken[info.name]}"
                )
                continue
            taken[info.name] = bundle.source
            before = [skill for skill in (index.find(info.name), index.at(bundle.directory)) if skill]
            remove = sorted({skill.directory for skill in before} - {bundle.directory})
            await self.tree.replace_folder(bundle.directory, bundle.files, remove)
            line = f"{info.name} ({bundle.directory}, {_count(len(bundle.files))})"
            if before:
                names = ", ".join(sorted({f"'{skill.name}'" for skill in before}))
                report.replaced.append(f"{line}, replacing {names}")
            else:
                report.imported.append(line)
        return report


def _count(files: int) -> str:
    return f"{files} file" if files == 1 else f"{files} files"
