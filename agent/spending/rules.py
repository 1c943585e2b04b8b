"""The two decisions about money, as pure functions: how much a request may reserve, did spending just
cross a warning threshold."""

from __future__ import annotations


def grant(spent: float, reserved: float, least: float, most: float, limit: float) -> float | None:
    """What a request that can cost up to ``most``, and is worth sending only if ``least`` is paid, may
    reserve under ``limit``, with ``spent`` settled and ``reserved`` held by requests in flight; None when
    it does not fit.

    Something must be left (a limit of 0 stops everything), and what is left must cover ``least``; the
    request then gets all that is left, up to ``most``. With ``least`` and ``most`` 0 this asks "is
    anything left?" (the check before a turn starts).
    """
    left = limit - (spent + reserved)
    if left <= 0 or left < least:
        return None
    return min(most, left)


def crossed(before: float, after: float, threshold: float) -> bool:
    """Whether spending went from under ``threshold`` to at or over it."""
    return before < threshold <= after
