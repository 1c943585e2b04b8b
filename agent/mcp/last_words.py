"""Which line of what a stdio MCP server wrote to stderr says why it stopped.

The last line is usually the one (a Python traceback ends with the exception), but launchers add noise
after it: npx prints its update notice ("npm notice New major version of npm available!") as it exits,
npm ends a failure with where its log file is and key-value details (``npm error code E404``), Node
ends a crash with its version (``Node.js v20.11.0``) after the stack frames. Those lines are skipped;
of npm's own failure, its first message line is the one that explains (``npm error 404 Not Found -
GET https://registry.npmjs.org/...``: the lines after it only elaborate). Pure, so it is tested
without a process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_STACK_FRAME = re.compile(r"\s+at \S")  # "    at Module._compile (node:internal/...)", indented
_NPM_FAILURE = re.compile(r"npm (?:error|ERR!)(?:\s|$)")
_NOISE = re.compile(
    r"""
    npm\ (?:notice|warn|WARN)(?:\s|$)                    # the update notice, warnings
    | npm\ (?:error|ERR!)\s+(?:                          # npm's failure, except what explains it:
        (?:code|errno|syscall|path|dest|command|signal|cwd|workspace|location)(?:\s|$)  # details
        | A\ complete\ log\ of\ this\ run                # where its log is ...
        | Log\ files\ were\ not\ written
        | Lifecycle\ script                               # a script it ran failed: that script said why
        | \S*[/\\]_logs[/\\]                              # ... and the log file's path
    )
    | Node\.js\ v\d+\S*\s*$                              # Node's version, after a crash
    | \^+\s*$                                            # the marker under the line that threw
    """,
    re.VERBOSE,
)


def last_words(lines: Sequence[str]) -> str | None:
    """The line among ``lines`` (oldest first) that says why the server stopped, on one line; None when
    there is none (nothing but blank lines and noise)."""
    said = [
        " ".join(line.split())
        for line in lines
        if not _NOISE.match(line.strip()) and not _STACK_FRAME.match(line)
    ]
    said = [line for line in said if line]
    if not said:
        return None
    if not _NPM_FAILURE.match(said[-1]):
        return said[-1]
    first = len(said) - 1
    while first > 0 and _NPM_FAILURE.match(said[first - 1]):
        first -= 1
    return said[first]
