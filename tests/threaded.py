"""Run an async test server (the provider emulator, the fake platforms) from a thread of its own.

For a caller without an event loop, or one whose loop must not serve the requests it makes (a
subprocess test, a benchmark timing the client side).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TypeVar

START_TIMEOUT = 10.0
T = TypeVar("T")


@contextmanager
def serve_in_thread(serve: Callable[[], AbstractAsyncContextManager[T]], name: str) -> Iterator[T]:
    """Enter ``serve()`` on a daemon thread with its own loop; yields what it yields (its URLs).

    Raises RuntimeError when it has not started within ``START_TIMEOUT`` seconds.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    served: list[T] = []
    errors: list[BaseException] = []

    async def main() -> None:
        try:
            async with serve() as value:
                served.append(value)
                ready.set()
                await stop.wait()
        except BaseException as exc:
            errors.append(exc)
            raise
        finally:
            ready.set()

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException:  # reported to the caller through `errors`
            pass
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT) or not served:
        raise RuntimeError(f"the {name} did not start") from (errors[0] if errors else None)
    try:
        yield served[0]
    finally:
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(stop.set)
        thread.join(START_TIMEOUT)
