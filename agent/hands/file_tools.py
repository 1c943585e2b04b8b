"""The ``files`` tool set: read_file, write_file, patch_file, list_files, search_files.

They use only the workspace and ``tools.allowed_paths`` (``agent.hands.paths``): a path outside them is
refused, never held for approval (to reach a folder, the owner adds it to ``tools.allowed_paths``).
Every call is in the audit (``agent.store.audit``); a write or patch is recorded before it happens.
Descriptions are fixed text, as every tool's (the prompt prefix is shared).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.hands import files
from agent.hands.file_pool import FilePool
from agent.hands.files import FileLimits
from agent.hands.paths import Confinement
from agent.store.audit import AuditEntry, Outcome
from agent.tools.registry import Tool, ToolContext, ToolError

TOOLSET = "files"
Operation = Callable[[dict[str, Any]], str]


def _text(args: dict[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    value = args.get(name)
    if value is None and not required:
        return default
    if not isinstance(value, str):
        raise ToolError(f"'{name}' must be text.")
    return value


def _number(args: dict[str, Any], name: str, default: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"'{name}' must be a whole number.")
    return value


@dataclass(frozen=True)
class FileTools:
    confinement: Confinement
    limits: FileLimits
    pool: FilePool = field(default_factory=FilePool)  # their own threads (``/readyz`` watches them)

    def tools(self) -> list[Tool]:
        return [
            self._tool(
                "read_file",
                "Read a text file (lines numbered). Paths are relative to the workspace.",
                {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "description": "First line to read (from 1)."},
                    "limit": {
                        "type": "integer",
                        "description": f"Lines to read (default {files.DEFAULT_LINES}).",
                    },
                },
                ["path"],
                "read",
                lambda a: files.read_file(
                    self.confinement,
                    _text(a, "path"),
                    self.limits,
                    offset=_number(a, "offset", 1),
                    limit=_number(a, "limit", files.DEFAULT_LINES),
                ),
                guidance="files: read_file before patch_file; patch_file for changes, write_file for new "
                "files.",
            ),
            self._tool(
                "write_file",
                "Create a text file or replace all of it (missing folders are created).",
                {"path": {"type": "string"}, "content": {"type": "string"}},
                ["path", "content"],
                "write",
                lambda a: files.write_file(
                    self.confinement, _text(a, "path"), _text(a, "content"), self.limits
                ),
                changes=True,
            ),
            self._tool(
                "patch_file",
                "Replace one exact piece of a text file: 'old' must occur exactly once (give enough "
                "surrounding text), and is replaced by 'new'.",
                {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                ["path", "old", "new"],
                "patch",
                lambda a: files.patch_file(
                    self.confinement, _text(a, "path"), _text(a, "old"), _text(a, "new"), self.limits
                ),
                changes=True,
            ),
            self._tool(
                "list_files",
                "List a folder (sizes, links and their targets); depth goes into subfolders.",
                {
                    "path": {"type": "string", "description": "Default: the workspace."},
                    "depth": {"type": "integer", "description": f"1 to {files.MAX_DEPTH} (default 1)."},
                },
                [],
                "list",
                lambda a: files.list_files(
                    self.confinement,
                    _text(a, "path", required=False, default="."),
                    depth=_number(a, "depth", 1),
                ),
            ),
            self._tool(
                "search_files",
                "Search text files for a regular expression; answers path:line: text for each matching "
                "line (.git and node_modules are skipped).",
                {
                    "pattern": {"type": "string", "description": "A regular expression (Python syntax)."},
                    "path": {"type": "string", "description": "A folder or file; default: the workspace."},
                    "glob": {"type": "string", "description": "Only file names matching this, e.g. *.py."},
                },
                ["pattern"],
                "search",
                lambda a: files.search_files(
                    self.confinement,
                    _text(a, "pattern"),
                    _text(a, "path", required=False, default="."),
                    self.limits,
                    glob=_text(a, "glob", required=False) or None,
                ),
            ),
        ]

    def _tool(
        self,
        name: str,
        description: str,
        properties: dict[str, Any],
        required: list[str],
        verb: str,
        operation: Operation,
        *,
        guidance: str = "",
        changes: bool = False,
    ) -> Tool:
        async def handle(args: dict[str, Any], context: ToolContext) -> str:
            return await _audited(
                context, name, _action(verb, args), self.pool, operation, args, before=changes
            )

        schema = {"type": "object", "properties": properties, "required": required}
        return Tool(name, description, schema, handle, guidance, TOOLSET)


def _action(verb: str, args: dict[str, Any]) -> str:
    """What the audit says was done: "write notes/todo.md", "search 'TODO' in src"."""
    path = args.get("path") if isinstance(args.get("path"), str) else "."
    if verb == "search":
        return f"search {args.get('pattern')!r} in {path}"
    return f"{verb} {path}"


async def _audited(
    context: ToolContext,
    tool: str,
    action: str,
    pool: FilePool,
    operation: Operation,
    args: dict[str, Any],
    *,
    before: bool,
) -> str:
    """Run ``operation`` on the file tools' threads and put it in the audit: a change before it happens
    (it does not happen when the row cannot be written), a read once it is done."""
    audit = context.store.audit
    person = context.approver.person if context.approver is not None else None
    entry = AuditEntry(context.session_key, context.session_id, tool, action, Outcome.RUNNING, person=person)
    started = await audit.begin(entry) if before else None
    try:
        result = await pool.run(functools.partial(operation, args))
    except ToolError as refusal:
        await _settle(context, entry, started, Outcome.FAILED, str(refusal))
        raise
    except OSError as error:
        await _settle(context, entry, started, Outcome.FAILED, str(error))
        raise ToolError(f"The file operation failed: {error.strerror or error}.") from None
    await _settle(context, entry, started, Outcome.RAN, result.partition("\n")[0])
    return result


async def _settle(
    context: ToolContext, entry: AuditEntry, started: int | None, outcome: Outcome, detail: str
) -> None:
    audit = context.store.audit
    if started is not None:
        await audit.finish(started, outcome, detail=detail)
    else:
        await audit.record(replace(entry, outcome=outcome, detail=detail))
