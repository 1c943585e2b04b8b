"""Which bot a log line is about, when one process serves several (``bots:``).

Start-up and drain run each bot's steps in turn in one task, and a bot's adapters, senders and workers
run in tasks started there. So the bot is a context, not a parameter: :func:`speaking_for` sets it
around a bot's step, tasks started inside inherit it (asyncio copies the context into a new task, and
``asyncio.to_thread`` into its thread), and a log record factory installed once prefixes every record
made in it (Herald's own lines and the SDKs') with ``bot NAME:``. No message names its bot by hand, and
a process without ``bots:`` logs exactly as before. What a step opens is closed at shutdown, long after
the step left its context: :func:`bot_step` names those lines too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Any

_BOT: ContextVar[str | None] = ContextVar("herald_bot", default=None)
_installed: list[Callable[..., logging.LogRecord]] = []  # the factory this module wraps, once installed


@contextmanager
def speaking_for(bot: str | None) -> Iterator[None]:
    """Every log record made inside (and in the tasks started inside) names ``bot``; None: no bot
    (the one bot of a home without ``bots:``), nothing added."""
    if bot is not None and not _installed:
        previous = logging.getLogRecordFactory()
        _installed.append(previous)
        logging.setLogRecordFactory(_naming(previous))
    token = _BOT.set(bot)
    try:
        yield
    finally:
        _BOT.reset(token)


@contextmanager
def bot_step(stack: AsyncExitStack, bot: str | None) -> Iterator[AsyncExitStack]:
    """:func:`speaking_for` ``bot`` around a step of its start that opens things: yields the stack to
    open them in, which ``stack`` closes where the step stands in it (as if they had been opened there),
    its lines naming ``bot`` as the start's did - a shutdown's adapters, schedulers and databases."""
    step = AsyncExitStack()

    async def leave(
        kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool | None:
        with speaking_for(bot):
            return await step.__aexit__(kind, error, traceback)

    stack.push_async_exit(leave)
    with speaking_for(bot):
        yield step


def _naming(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        bot = _BOT.get()
        if bot is not None and isinstance(record.msg, str):  # a bot name has no "%" (config.BOT_NAME)
            record.msg = f"bot {bot}: {record.msg}"
        return record

    return make
