"""The ``herald`` command line: one module per command group; ``dispatch`` parses and runs a command.

A command imports what it needs when it runs, so ``herald --version`` and ``herald --help`` load no
SDK, no database layer and no provider client. :func:`main` is the console script's entry point.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``herald`` with ``argv`` (default: the process's arguments) and exit with its code."""
    from gateway.cli.dispatch import main as dispatch_main

    dispatch_main(argv)
