"""``herald skills list|show|edit|import``: the skill library from the command line.

They work on whichever backend the configuration selects (folders in ``HERALD_HOME/skills`` with
SQLite, the database with PostgreSQL: ``gateway.home.memory_skills``) and need no API key. A skill is
checked as the index checks it (front matter with a name, no prompt injection in its name or
description) before it is saved or imported; new sessions list it, running sessions keep their index.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agent.skills import SKILL_FILE, Bundle, SkillError, SkillLibrary, Unreadable, read_bundles
from gateway.cli.editor import edit_then_save
from gateway.failures import EXIT_FAILED, EXIT_UNUSABLE, CommandFailed
from gateway.home import HeraldHome
from gateway.home.database import home_config
from gateway.home.memory_skills import open_memory_and_skills


def run_skills_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_run(home, args))


async def _run(home: HeraldHome, args: argparse.Namespace) -> int:
    reads = args.skills_command in ("list", "show")
    async with open_memory_and_skills(home_config(home), home, read_only=reads) as kept:
        library = kept.skills
        try:
            if args.skills_command == "list":
                print(await _list(library))
            elif args.skills_command == "show":
                print(await _show(library, args.name, args.path))
            elif args.skills_command == "edit":
                print(await _edit(library, args.name))
            else:
                return await _import(library, args.directory)
        except SkillError as error:  # an unknown skill or path, a binary file: the input was wrong
            raise CommandFailed(str(error), EXIT_UNUSABLE) from None
    return 0


async def _list(library: SkillLibrary) -> str:
    index = await library.index()
    for problem in index.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if not index.skills:
        return f"No skills are installed ({library.description})."
    rows = [(skill.name, skill.category, skill.directory, skill.description) for skill in index.skills]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = [f"Skills in {library.description}:"]
    for row in rows:
        padded = [value.ljust(width) for value, width in zip(row[:3], widths, strict=True)]
        lines.append("  ".join([*padded, row[3]]))
    return "\n".join(line.rstrip() for line in lines)


async def _show(library: SkillLibrary, name: str, path: str | None) -> str:
    if path is not None:
        return await library.read(name, path)
    skill, text = await library.skill_text(name)
    files = await library.files(skill)
    listing = "".join(f"\n- {file}" for file in files)
    return f"{text.rstrip()}\n\nFiles in {skill.directory}:{listing}" if files else text.rstrip()


async def _edit(library: SkillLibrary, name: str) -> str:
    draft = await library.draft(name)

    async def save(text: str) -> str | None:
        return await library.save(draft, text)

    done = await edit_then_save(draft.text, SKILL_FILE, save)
    if done is not None:
        return done
    return (
        f"Skill '{name}': nothing changed."
        if draft.original is not None
        else "Nothing saved: no skill created."
    )


async def _import(library: SkillLibrary, directory: Path) -> int:
    found = await asyncio.to_thread(read_bundles, directory)
    report = await library.install([bundle for bundle in found if isinstance(bundle, Bundle)])
    report.skipped[:0] = [f"{item.source}: {item.reason}" for item in found if isinstance(item, Unreadable)]
    lines = [f"imported {line}" for line in report.imported]
    lines += [f"replaced {line}" for line in report.replaced]
    lines += [f"skipped {line}" for line in report.skipped]
    counts = (
        f"{len(report.imported)} imported, {len(report.replaced)} replaced, {len(report.skipped)} skipped"
    )
    print("\n".join([*lines, f"{counts} ({library.description})."]))
    return EXIT_FAILED if report.skipped else 0
