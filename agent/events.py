"""What a turn reports while it runs, and the pump that hands those reports to a slow consumer.

A consumer (the terminal printer, a platform's stream-by-edit) may be slow: a Telegram edit waits for
the chat's rate limit. The model stream must not wait for it, or one slow chat would hold a provider
connection (and a concurrency slot) open. So events go through an :class:`EventPump`: ``emit`` never
blocks, text deltas that pile up while the consumer is busy are merged into one, and the consumer runs
in its own task. A consumer that raises stops receiving events; the turn sees ``failure`` and ends as a
failed turn with one clear line for the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.compression.engine import CompressionOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolStarted:
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolFinished:
    name: str
    is_error: bool


@dataclass(frozen=True)
class Retrying:
    attempt: int
    delay: float
    reason: str
    discard_partial: bool  # text already streamed in this attempt will be sent again


@dataclass(frozen=True)
class FailingOver:
    """The session's own model failed for good; a fallback model (``model``) is asked next
    (``agent.failover``). ``line`` says so to the person."""

    model: str
    line: str
    discard_partial: bool  # text already streamed by the failed model is not the answer


@dataclass(frozen=True)
class Compressed:
    outcome: CompressionOutcome


TurnEvent = TextDelta | ToolStarted | ToolFinished | Retrying | FailingOver | Compressed
EventCallback = Callable[[TurnEvent], Awaitable[None]]


class EventConsumerFailed(Exception):
    """The consumer of a turn's events raised; the original exception is the ``__cause__``."""


class EventPump:
    """Delivers events to ``consumer`` in order, from a task of its own, merging queued text.

    ``emit`` is synchronous and never waits. ``flush`` waits until everything emitted so far was
    delivered and raises :class:`EventConsumerFailed` if the consumer failed. ``aclose`` stops delivery
    (used when the turn is cancelled). A pump without a consumer drops everything.
    """

    def __init__(self, consumer: EventCallback | None) -> None:
        self._consumer = consumer
        self._queue: deque[TurnEvent] = deque()
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None

    def emit(self, event: TurnEvent) -> None:
        if self._consumer is None or self.failure is not None:
            return
        if isinstance(event, TextDelta) and self._queue and isinstance(self._queue[-1], TextDelta):
            self._queue[-1] = TextDelta(self._queue[-1].text + event.text)
        else:
            self._queue.append(event)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(self._consumer))

    async def _drain(self, consumer: EventCallback) -> None:
        while self._queue:
            event = self._queue.popleft()
            try:
                await consumer(event)
            except Exception as exc:  # the consumer's bug or a platform failure: the turn decides
                log.warning("the turn's event consumer failed: %s: %s", type(exc).__name__, exc)
                self.failure = exc
                self._queue.clear()
                return

    def check(self) -> None:
        """Raise :class:`EventConsumerFailed` if the consumer has failed so far."""
        if self.failure is not None:
            raise EventConsumerFailed(f"{type(self.failure).__name__}: {self.failure}") from self.failure

    async def flush(self) -> None:
        """Wait until every emitted event was delivered (or the consumer failed)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        self.check()

    async def aclose(self) -> None:
        self._queue.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
