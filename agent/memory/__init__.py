"""Curated memory: MEMORY.md (the agent's notes) and USER.md (about the user), per person.

Each document is a short list of entries separated by a line containing only "§". The documents are
small and capped so that their snapshot, frozen into a session's volatile layer when the session starts,
stays cheap. Edits are stored at once but only show up in the system prompt of the next session: the
running session keeps its bytes (docs/ARCHITECTURE.md, cache invariants 1 and 3).

Nobody's words reach anyone else: memory is kept per *scope* (docs/ARCHITECTURE.md, reliability invariant
5). The owner (the terminal, the gateway's admins) has scope ``owner``; every other person has their
own (``user:PLATFORM:ID``); a group chat has its own (``chat:PLATFORM:ID``), and the memory tool in a
group writes there, never into a member's documents. The gateway decides a session's scope; the
session stores it.

- :mod:`agent.memory.entries`: the rules (entries, limits, edits, refusals, the snapshot's bytes),
  pure functions shared by every backend.
- :mod:`agent.memory.store`: :class:`MemoryBank` / :class:`MemoryStore`, the async API, over a
  :class:`MemoryDocuments` backend.
- Backends: :mod:`agent.memory.files` (files under ``HERALD_HOME/memories``, the default with SQLite)
  and :mod:`agent.memory.database` (the ``memory_documents`` table, with PostgreSQL).
"""

from agent.memory.database import DatabaseMemoryDocuments
from agent.memory.entries import (
    ENTRY_JOINER,
    FILE_NAMES,
    OWNER_SCOPE,
    SEPARATOR,
    TARGETS,
    MemoryChangedError,
    MemoryEditError,
    MemoryLimitError,
    MemorySnapshot,
    MemoryTarget,
    MemoryToolError,
    chat_scope,
    format_usage,
    join_entries,
    numbered_entries,
    parse_entries,
    scope_parts,
    usage_of,
    user_scope,
)
from agent.memory.files import FileMemoryDocuments
from agent.memory.store import MemoryBank, MemoryDocuments, MemoryStore

__all__ = [
    "ENTRY_JOINER",
    "FILE_NAMES",
    "OWNER_SCOPE",
    "SEPARATOR",
    "TARGETS",
    "DatabaseMemoryDocuments",
    "FileMemoryDocuments",
    "MemoryBank",
    "MemoryChangedError",
    "MemoryDocuments",
    "MemoryEditError",
    "MemoryLimitError",
    "MemorySnapshot",
    "MemoryStore",
    "MemoryTarget",
    "MemoryToolError",
    "chat_scope",
    "format_usage",
    "join_entries",
    "numbered_entries",
    "parse_entries",
    "scope_parts",
    "usage_of",
    "user_scope",
]
