"""The two decisions about money, as pure functions: may a request go out, did spending just cross a
warning threshold."""

from __future__ import annotations


def fits(spent: float, reserved: float, estimate: float, limit: float) -> bool:
    """Whether a request estimated at ``estimate`` may go out under ``limit``, with ``spent`` settled and
    ``reserved`` held by requests in flight.

    Something must be left (a limit of 0 stops everything), and what is left must cover the estimate.
    With ``estimate`` 0 this asks "is anything left?" (the check before a turn starts).
    """
    committed = spent + reserved
    return committed < limit and committed + estimate <= limit


def crossed(before: float, after: float, threshold: float) -> bool:
    """Whether spending went from under ``threshold`` to at or over it."""
    return before < threshold <= after
