"""``herald sessions delete --chat KEY | --person PLATFORM:ID``: forget a chat, or a person
(:mod:`gateway.retention.forget` says what goes and what stays: the spend, under no name)."""

from __future__ import annotations

import argparse
import asyncio

from gateway.failures import EXIT_FAILED, EXIT_OK
from gateway.home import HeraldHome
from gateway.home.database import home_config, open_home_storage
from gateway.home.memory_skills import memory_and_skills


def run_sessions_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_delete(home, chat=args.chat, person=args.person))


async def _delete(home: HeraldHome, *, chat: str | None, person: str | None) -> int:
    from gateway.retention.forget import Forgetter

    config = home_config(home)
    async with open_home_storage(home, config, pool_size=2) as storage:
        kept = memory_and_skills(config, home, storage)
        forgetter = Forgetter(storage, kept.memory, config.storage.retention.batch_rows)
        if person is not None:
            platform, _, user_id = person.partition(":")
            deleted = await forgetter.person(platform, user_id)
            whom = f"person {person}"
        else:
            assert chat is not None
            deleted = await forgetter.chat(chat)
            whom = f"chat {chat}"
    if not (deleted.chats or deleted.rows or deleted.memory_scopes or deleted.jobs):
        print(f"Nothing of {whom} was found: nothing was deleted (a chat is named by its session key, as "
              "herald insights shows it).")  # fmt: skip
        return EXIT_FAILED
    print(f"Deleted {whom}:")
    print(f"  chats: {', '.join(deleted.chats) or 'none'}")
    print(f"  {deleted.sessions:,} sessions, {deleted.messages:,} messages, {deleted.files:,} files")
    print(f"  memory: {', '.join(deleted.memory_scopes) or 'none'}")
    print(f"  {deleted.jobs:,} scheduled jobs, {deleted.rows:,} other rows (inbox, outbox, audit...)")
    print("  What they cost stays in insights, the console and budgets, under no name (deleted:…).")
    return EXIT_OK
