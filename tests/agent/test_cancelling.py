"""Stopping tasks whose cancellation a library loses (``resilience.cancelling``): a background loop
that retries a call which turned the cancellation into its own error is stopped all the same, and a
shutdown that stops it returns instead of waiting forever (a SIGTERM that never ended)."""

from __future__ import annotations

import asyncio

import pytest

from resilience import cancelling
from resilience.cancelling import cancel_and_wait, wait_event
from resilience.loops import BackgroundLoop


class LibraryTimeout(Exception):
    """What a client library raises when its read timeout and a cancellation arrive together."""


async def call_that_loses_the_first_cancellation(lost: list[int]) -> None:
    """A library call: the first cancellation it sees comes out as its own timeout error."""
    try:
        await asyncio.sleep(0.5)
    except asyncio.CancelledError:
        if not lost:
            lost.append(1)
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # as asyncio.timeout does
            raise LibraryTimeout("timed out reading the answer") from None
        raise


@pytest.fixture(autouse=True)
def quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cancelling, "AGAIN_EVERY", 0.05)


async def test_a_retry_loop_that_lost_its_cancellation_is_stopped_all_the_same() -> None:
    lost: list[int] = []
    calling = asyncio.Event()

    async def keeper() -> None:  # the work queue's keeper, say: a Redis error is retried
        while True:
            calling.set()
            try:
                await call_that_loses_the_first_cancellation(lost)
            except LibraryTimeout:
                continue

    loop = BackgroundLoop("the keeper", keeper).start()
    await calling.wait()
    async with asyncio.timeout(10):  # without a second cancellation: stopped never
        await loop.stop()
    assert lost == [1]  # the first cancellation was lost, and the loop stopped anyway
    assert loop.done


async def test_every_task_is_cancelled_with_the_message_and_waited_for() -> None:
    seen: list[str] = []

    async def run() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as cancelled:
            seen.append(str(cancelled.args[0]) if cancelled.args else "")
            raise

    tasks = [asyncio.create_task(run()) for _ in range(3)]
    await asyncio.sleep(0)
    await cancel_and_wait([*tasks, asyncio.create_task(asyncio.sleep(0))], message="shutting down")
    assert all(task.cancelled() for task in tasks)
    assert seen == ["shutting down"] * 3


async def test_a_wait_cancelled_just_as_its_event_is_set_is_cancelled_all_the_same() -> None:
    """On Python 3.11, ``asyncio.wait_for(event.wait(), t)`` returns normally when the event is set in the
    step the cancellation arrives: a loop around it went on, and a fake's long poll was held after its
    client had hung up. :func:`wait_event` raises the cancellation."""
    event = asyncio.Event()
    went_on: list[bool] = []

    async def waiting() -> None:
        went_on.append(await wait_event(event, 30.0))

    task = asyncio.create_task(waiting())
    await asyncio.sleep(0)  # its first step: waiting now
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert went_on == []


async def test_a_wait_ends_with_its_event_or_its_time() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_soon(event.set)
    assert await wait_event(event, 30.0) is True
