"""``herald memory list|show|edit``: read and edit curated memory from the command line.

They work on whichever backend the configuration selects (files in ``HERALD_HOME`` with SQLite, the
database with PostgreSQL: ``gateway.home.memory_skills``) and need no API key. An edit is one save of the
whole document, under the same rules as the memory tool (limit, injection scan), and is refused when
the document changed while the editor was open; running sessions keep their snapshot, the next session
of the scope sees the edit.
"""

from __future__ import annotations

import argparse
import asyncio

from agent.memory import (
    FILE_NAMES,
    OWNER_SCOPE,
    TARGETS,
    MemoryStore,
    MemoryTarget,
    MemoryToolError,
    usage_of,
)
from gateway.cli.editor import edit_then_save
from gateway.failures import EXIT_UNUSABLE, CommandFailed
from gateway.home import HeraldHome
from gateway.home.database import home_config
from gateway.home.memory_skills import MemoryAndSkills, open_memory_and_skills


def run_memory_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_run(home, args))


async def _run(home: HeraldHome, args: argparse.Namespace) -> int:
    reads = args.memory_command in ("list", "show")
    async with open_memory_and_skills(home_config(home), home, read_only=reads) as kept:
        if args.memory_command == "list":
            print(await _list(kept))
        elif args.memory_command == "show":
            print(await _show(_store(kept, args.scope)))
        else:
            target: MemoryTarget = "user" if args.user else "memory"
            print(await _edit(_store(kept, args.scope), target))
    return 0


def _store(kept: MemoryAndSkills, scope: str | None) -> MemoryStore:
    """The store of ``scope``, the owner's when the command line named none."""
    try:
        return kept.memory.store(OWNER_SCOPE if scope is None else scope)
    except ValueError as error:
        raise CommandFailed(f"{error}.", EXIT_UNUSABLE) from None


async def _read(store: MemoryStore, target: MemoryTarget) -> str:
    try:
        return await store.read(target)
    except MemoryToolError as error:  # a hand-edited file that is not text
        raise CommandFailed(str(error), EXIT_UNUSABLE) from None


async def _list(kept: MemoryAndSkills) -> str:
    scopes = await kept.memory.scopes()
    if not scopes:
        return f"No memory yet ({kept.memory.description})."
    width = max(len(scope) for scope in scopes)
    lines = [f"Memory in {kept.memory.description}:"]
    for scope in scopes:
        store = kept.memory.store(scope)
        usages = [f"{FILE_NAMES[t]} {usage_of(await _read(store, t), store.limit(t))}" for t in TARGETS]
        lines.append(f"{scope:<{width}}  {'  '.join(usages)}")
    return "\n".join(lines)


async def _show(store: MemoryStore) -> str:
    sections = [f"Memory of {store.scope} ({store.documents.description}):"]
    for target in TARGETS:
        text = await _read(store, target)
        sections.append(f"## {FILE_NAMES[target]} {usage_of(text, store.limit(target))}\n{text or '(empty)'}")
    return "\n\n".join(sections)


async def _edit(store: MemoryStore, target: MemoryTarget) -> str:
    original = await _read(store, target)

    async def save(text: str) -> str | None:
        return await store.save_text(target, text, expected=original)

    done = await edit_then_save(original, FILE_NAMES[target], save)
    return (
        f"{done} (scope {store.scope})"
        if done
        else f"{FILE_NAMES[target]} of {store.scope}: nothing changed."
    )
