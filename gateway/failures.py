"""What a user reads when a command cannot go on: one sentence and an exit code, never a traceback.

Every kind of failure that can reach the command line is put into words here, in one place, so no
command needs its own ``try``: bad configuration, a damaged or unwritable database, a home that
cannot be created or read, a command that says itself why it could not do its work
(:class:`CommandFailed`), and, last, anything unforeseen (a bug: its traceback is logged and shown
with ``-v``).

Exit codes (docs/commands.md lists them too):

- 0: done.
- 1: the command ran but did not succeed: no answer from the model, ``doctor`` found problems, an
  edit was refused.
- 2: the command could not run: bad input, bad configuration, a damaged or unwritable home.
- 70: a bug in Herald.
- 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2
EXIT_BUG = 70
EXIT_INTERRUPTED = 130


class CommandFailed(Exception):
    """A command could not do what it was asked (an edit refused, a name that is not there); the message
    says why and what to do. ``code`` is the exit code: EXIT_FAILED when the command ran but what it was
    asked was refused, EXIT_UNUSABLE when the input itself was wrong."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


class PlatformStartFailed(Exception):
    """A chat platform refused the gateway at start-up (bad token, a setting missing in its developer
    portal, unreachable); the message says why and what to do."""


class AlreadyRunning(Exception):
    """Another gateway serves this home (outside a cluster one process does); the message names it and
    says what to do."""


@dataclass(frozen=True)
class Failure:
    """One sentence for stderr (without the ``herald:`` prefix; empty: nothing to say) and the exit
    code."""

    message: str
    code: int


def explain(error: Exception) -> Failure:
    """The sentence and exit code for ``error``; never raises."""
    if isinstance(error, CommandFailed):
        return Failure(str(error), error.code)
    if isinstance(error, (PlatformStartFailed, AlreadyRunning)):
        return Failure(str(error), EXIT_UNUSABLE)
    if isinstance(error, BrokenPipeError):  # `herald insights | head -1`: the reader has had enough
        return Failure("", EXIT_FAILED)
    # Imported here: a usage error is explained above before any command loaded the config schema or
    # the database layer (half a second of imports); either error below comes from a loaded module.
    from agent.db import StorageError
    from gateway.config import ConfigError

    if isinstance(error, ConfigError):
        return Failure(f"configuration error: {error}", EXIT_UNUSABLE)
    if isinstance(error, StorageError):  # damaged, unwritable, too new, unreachable: it says which
        return Failure(str(error), EXIT_UNUSABLE)
    if isinstance(error, OSError):
        return Failure(describe_os_error(error), EXIT_UNUSABLE)
    log.debug("unexpected failure", exc_info=error)
    return Failure(
        f"unexpected error ({type(error).__name__}: {headline(error)}). This is a bug in Herald: run the "
        "command again with -v to see where it happened, and please report it.",
        EXIT_BUG,
    )


HEADLINE_LIMIT = 300


def headline(error: BaseException) -> str:
    """The first line of ``error``'s message, at most HEADLINE_LIMIT characters: a database error goes on
    with its SQL statement and the values it carried (people's messages), which are no one's business
    on a terminal (with -v the traceback is logged, still without the values)."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= HEADLINE_LIMIT else first[: HEADLINE_LIMIT - 1] + "…"


def describe_os_error(error: OSError) -> str:
    """A file-system failure (a home that cannot be created, written or read) and what to do."""
    what = error.strerror or type(error).__name__
    where = f"{error.filename}: " if error.filename else ""
    return (
        f"{where}{what}. Check that HERALD_HOME and the files in it exist, belong to you and are "
        "writable, or point HERALD_HOME at another directory."
    )
