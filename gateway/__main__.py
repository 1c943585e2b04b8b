"""``python -m gateway`` is the same as the ``herald`` command."""

from gateway.cli.dispatch import main

main()
