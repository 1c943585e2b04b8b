"""One turn's envelope: what every turn of the agent passes through, whichever way it came in.

A chat's message (``gateway.conversation.turns``), a request of the OpenAI-compatible API
(``gateway.openai_api.answering``) and a scheduled job's run (``gateway.cron.runner``) are channels of
:func:`run_turn`, which does for each, in this order:

1. the spend check: a turn over one of its charge's limits does not start (nothing reaches the model);
2. a slot of the one turn cap (``gateway.intake.turn_cap``: this process's and the cluster's), held until
   the turn ended (not by a run whose requests go through the provider's batch API: it waits for its
   batch for up to hours, asking nothing of the model meanwhile, and must not keep chats waiting);
3. the charge: every model request of the turn, and what the channel does around it (a transcription, a
   voice note), counts against the charge's limits;
4. the turn (:func:`take_turn`: session hygiene, the agent's turn, its usage counted, one log line);
5. the access check: whoever the turn is for may have lost access meanwhile (``herald pairing revoke``);
   then nothing more is said to them;
6. the outcome, said the channel's way: stopped by a limit, failed, or answered;
7. an answered session's background review (``gateway.conversation.reviews``).

What stays each channel's own (a :class:`Channel`): the session and its lease, found before; a chat
reads its attachments, streams its answer, may speak it, and closes its inbox row (a stopped turn marked
so); the API answers in HTTP and withdraws a turn its client did not receive; cron batches its requests,
records its run and delivers into its target chat.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from agent.api import (
    OPEN,
    Approver,
    Charge,
    CompressionOutcome,
    EventCallback,
    Lease,
    Media,
    Refusal,
    SessionRecord,
    ToolGate,
    TurnResult,
    charging,
)
from gateway.conversation.context import TurnServices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnRequest:
    """The turn a channel asks for: ``Agent.run_turn``'s arguments, and how its log line names it."""

    lease: Lease
    session: SessionRecord
    text: str
    what: str  # names the chat, the request or the job in the log
    meta: Mapping[str, Any]
    on_compressed: Callable[[CompressionOutcome], Awaitable[None]]
    on_event: EventCallback | None = None
    media: Sequence[Media] = ()
    gate: ToolGate = OPEN
    purpose: str = "turn"
    approver: Approver | None = None


class Settled(Exception):
    """Raised by a channel as its turn would start (an attachment refused, or one a limit cannot pay): it
    closed the turn its own way, and nothing more is done."""


class Channel(Protocol):
    """One way of talking to Herald, as the envelope sees it: the per-channel parts of a turn."""

    reviewed: bool  # whether an answered session may get a background review (not a job's)
    capped: bool  # whether the turn takes a slot of the turn cap (not a batched job's run)

    def around(self) -> AbstractAsyncContextManager[TurnRequest]:
        """The turn to run, and what holds around it, inside its slot and its charge (a chat's stream and
        "typing…", cron's batching). May raise :class:`Settled` on entering."""

    async def ending(self, result: TurnResult) -> None:
        """Just after the turn, still inside :meth:`around` and the charge (a chat speaks its answer)."""

    async def lost_access(self) -> bool:
        """True when whoever the turn is for lost access during it; the channel closed it quietly."""

    async def refused(self, refusal: Refusal) -> None:
        """A spend limit refused the turn before it started, or stopped it before its next request."""

    async def failed(self, result: TurnResult) -> None:
        """The turn ended without an answer (``result.error`` says why)."""

    async def answered(self, result: TurnResult) -> None:
        """Hand over the answer."""


async def run_turn(services: TurnServices, channel: Channel, charge: Charge) -> TurnResult | None:
    """Run one turn of ``channel`` in the envelope (the module's steps); its result, or None when it was
    not run to an outcome (over a limit before, settled by the channel, access lost during it). Raises
    what the channel's parts and ``Agent.run_turn`` raise."""
    over = await services.budgets.check(charge)
    if over is not None:  # nothing reaches the model
        await channel.refused(over)
        return None
    try:
        async with services.turns.slot() if channel.capped else nullcontext():
            with charging(charge):
                async with channel.around() as turn:
                    result = await take_turn(services, turn)
                    await channel.ending(result)
    except Settled:
        return None
    if await channel.lost_access():
        return None
    if result.refused is not None:
        await channel.refused(result.refused)
    elif result.error:
        await channel.failed(result)
    else:
        await channel.answered(result)
        if channel.reviewed:
            await services.reviews.after_turn(turn.session)
    return result


async def take_turn(services: TurnServices, turn: TurnRequest) -> TurnResult:
    """A turn of the agent as the gateway runs every one.

    Session hygiene first (a session at 85% of its window is compressed before the agent reads it;
    ``on_compressed`` tells whoever should know), then the agent's turn (``Agent.run_turn``), its usage
    counted for ``/metrics``, and one log line with its tokens. Raises what ``run_turn`` raises.
    """
    agent = services.runtime.agent
    lease, session = turn.lease, turn.session
    outcome = await agent.hygiene(lease, session)
    if outcome is not None and outcome.method != "skipped":  # over a limit: the turn's own line says so
        await turn.on_compressed(outcome)
    started = time.monotonic()
    result = await agent.run_turn(
        lease,
        session,
        turn.text,
        turn.on_event,
        meta=turn.meta,
        gate=turn.gate,
        purpose=turn.purpose,
        media=turn.media,
        approver=turn.approver,
    )
    services.metrics.count_usage(result.usage)
    usage = result.usage
    log.info(
        "%s session %s: %s in %.2fs (tokens in %d, cache read %d, cache write %d, out %d)",
        turn.what, session.id, _outcome(result), time.monotonic() - started,
        usage.prompt_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
    )  # fmt: skip
    return result


def _outcome(result: TurnResult) -> str:
    if result.refused is not None:
        return "stopped by a spend limit"
    return "failed" if result.error else "answered"
