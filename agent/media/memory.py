"""The memory images take while they are decoded: one budget for the process, given back afterwards.

Kept apart from the decoding (:mod:`agent.media.decode`, which loads Pillow) so the gateway can hold a
budget from the start and load Pillow only with the first image.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Iterator


class DecodeBudget:
    """The bytes of memory that decoding images may take at once, in all threads together: each
    decode reserves its estimate first and waits while the rest of the budget is in use."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, cost: int) -> Iterator[None]:
        """Hold ``cost`` bytes (at most :attr:`limit`) while the block runs, waiting until they are
        free."""
        assert cost <= self.limit, "refuse an image that alone needs more than the whole budget"
        with self._changed:
            self._changed.wait_for(lambda: self._used + cost <= self.limit)
            self._used += cost
        try:
            yield
        finally:
            with self._changed:
                self._used -= cost
                self._changed.notify_all()


def return_free_memory() -> None:
    """Give the memory freed since to the system (glibc's ``malloc_trim``). The C allocator keeps freed
    blocks for reuse, and after a large decode that is hundreds of megabytes a gateway may not need
    again for hours (four large images left 1.4 GB in use). Does nothing where the C library is not
    glibc."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _malloc_trim()
