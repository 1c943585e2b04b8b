"""Long polling that confirms an update only after the gateway stored it.

PTB's ``Updater`` advances the ``getUpdates`` offset as soon as updates are fetched and, on stop,
polls once more to mark everything read, so a crash or a stop loses whatever was still queued
(see shared/notes/platforms.md). This loop is the replacement: the offset sent to Telegram moves
past the updates of one ``getUpdates`` only after the handler returned for all of them (the gateway
stores a whole batch in one transaction). A handler failure waits and fetches again from the same
offset, so Telegram hands the same updates back. Cancelling the task confirms nothing further.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import logging
from collections.abc import Awaitable, Callable, Sequence

from telegram import Bot, Update
from telegram.error import Conflict

from adapters.base import AdapterStatus, SinkRetry
from adapters.reconnect import Reconnect
from resilience.backoff import Backoff

from .redaction import describe

log = logging.getLogger(__name__)

ALLOWED_UPDATES = ("message", "callback_query")  # callback_query: a press of an inline button
NOT_ALLOWED_PAUSE = 0.05  # seconds between looks at ``allowed`` while it says no
CONFLICT_ADVICE = (
    "only one process may poll per bot token, and not while a webhook is set. Stop the other "
    "instance or use webhook mode"
)
UpdateHandler = Callable[[Sequence[Update]], Awaitable[None]]


class Poller:
    """Fetches updates with ``getUpdates`` and hands each batch to ``handle``, in order.

    Failures never end the loop: network trouble and unexpected errors back off with jitter, a
    ``Conflict`` (another process polling this token, or a webhook set) retries slowly. ``allowed``
    (optional) is asked before every ``getUpdates``; none is made while it says False. Each streak
    is logged once when it starts and once when it ends; ``status`` follows along for ``/readyz``
    (``adapters.reconnect``).
    """

    def __init__(
        self,
        bot: Bot,
        handle: UpdateHandler,
        status: AdapterStatus,
        *,
        token: str,
        poll_timeout: float,
        retry_base: float,
        retry_cap: float,
        allowed: Callable[[], bool] | None = None,
    ) -> None:
        self._bot = bot
        self._allowed = allowed
        self._handle = handle
        self._status = status
        self._token = token
        self._timeout = dtm.timedelta(seconds=poll_timeout)  # PTB sends whole seconds as an int
        backoff = Backoff(retry_base, max(retry_base, retry_cap))  # jittered: no lockstep across processes
        self._link = Reconnect(backoff, "Telegram getUpdates", log=log, status=status)
        self._sink_retry = SinkRetry(  # the updates stay unconfirmed: the next getUpdates repeats them
            backoff, log=log, describe=lambda exc: describe(exc, token), status=status
        )

    async def run(self) -> None:
        offset: int | None = None  # None: from the oldest update Telegram still holds for us
        while True:
            if self._allowed is not None and not self._allowed():  # not ours to poll now: wait to be
                await asyncio.sleep(NOT_ALLOWED_PAUSE)  # stopped (or allowed again)
                continue
            updates = await self._fetch(offset)
            if updates and await self._hand_over(updates):
                offset = updates[-1].update_id + 1

    async def _fetch(self, offset: int | None) -> Sequence[Update]:
        """One ``getUpdates``; on failure, log, wait and return nothing."""
        try:
            updates = await self._bot.get_updates(
                offset=offset, timeout=self._timeout, allowed_updates=ALLOWED_UPDATES
            )
        except Conflict as exc:  # a failure known to last: retried slowly
            await self._link.failed(
                describe(exc, self._token), longest=True, level=logging.ERROR, advice=CONFLICT_ADVICE
            )
            return ()
        except Exception as exc:  # network, 5xx, a bad token, a PTB parsing bug: never end the loop
            await self._link.failed(describe(exc, self._token))
            return ()
        self._link.recovered()
        return updates

    async def _hand_over(self, updates: Sequence[Update]) -> bool:
        """True once ``handle`` returned; False (after a backoff) if it raised: nothing confirmed."""
        first, last = updates[0].update_id, updates[-1].update_id
        what = f"Telegram update {first}" if first == last else f"Telegram updates {first}-{last}"
        return await self._sink_retry.attempt(lambda: self._handle(updates), what)
