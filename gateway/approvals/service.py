"""Holding a command for the owner's yes: the question in the chat, the wait, the answer, the audit.

:class:`Approvals` is the gateway's side of ``agent.tools.approval``. A turn's :class:`TurnApprover`
asks it; it checks the session's earlier approvals, records the held command (``records``), queues the
question with its buttons into the chat the turn answers (the outbox, like every reply), and waits for
the row to change:

- a decision made in this process (a button, ``/approve``, ``/deny``) wakes the wait at once;
- in a cluster, a decision made on another process is announced on the cluster's control channel
  (:attr:`Approvals.announce`, wired by ``gateway.wiring.core``) and wakes it as promptly;
- whatever was missed, the wait also reads the row, every quarter second at first and at least every
  two seconds (``resilience.backoff``): a lost announcement costs a moment, never the answer;
- ``tools.approval_timeout`` seconds without an answer is a no (the row becomes ``expired`` by the same
  compare-and-set, so an answer at the last moment and the expiry cannot both count).

Whoever settles a row records the decision in the audit and edits the question to show the answer,
without its buttons. A turn stopped while it waits (``/stop``, shutdown) withdraws its question.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

from adapters.base import Adapter, ChatAddress, OutboundText
from agent.api import (
    Answer,
    ApprovalRequest,
    AuditEntry,
    AuditLog,
    AuditOutcome,
    Verdict,
)
from gateway.approvals import prompt
from gateway.approvals.records import ApprovalRecords, Held, State
from gateway.delivery.replies import Replies
from gateway.ledger.outbox import Operation, Outbox, Outgoing
from resilience.backoff import Backoff

log = logging.getLogger(__name__)

POLL = Backoff(first=0.25, cap=2.0)  # reading the row while no announcement came
VERDICTS = {
    State.APPROVED_ONCE: Verdict.APPROVED_ONCE,
    State.APPROVED_SESSION: Verdict.APPROVED_SESSION,
    State.DENIED: Verdict.DENIED,
    State.EXPIRED: Verdict.EXPIRED,
    State.WITHDRAWN: Verdict.DENIED,
}
OUTCOMES = {
    State.APPROVED_ONCE: AuditOutcome.APPROVED_ONCE,
    State.APPROVED_SESSION: AuditOutcome.APPROVED_SESSION,
    State.DENIED: AuditOutcome.DENIED,
    State.EXPIRED: AuditOutcome.EXPIRED,
    State.WITHDRAWN: AuditOutcome.WITHDRAWN,
}
Announce = Callable[[str], Awaitable[None]]


class Approvals:
    """Held commands of this process's turns, and the answers to anyone's."""

    def __init__(
        self,
        records: ApprovalRecords,
        replies: Replies,
        outbox: Outbox,
        adapters: Mapping[str, Adapter],
        audit: AuditLog,
        *,
        timeout: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.records = records
        self.replies = replies
        self.outbox = outbox
        self.adapters = adapters
        self.audit = audit
        self.timeout = timeout
        self.clock = clock
        self.announce: Announce | None = None  # tells the cluster's other processes of a decision
        self._waiting: dict[str, asyncio.Event] = {}

    def for_turn(self, address: ChatAddress, person: str | None) -> TurnApprover:
        """The approver of a turn answering in ``address`` for ``person`` (platform:user_id)."""
        return TurnApprover(self, address, person)

    # --- asking -------------------------------------------------------------------------------------

    async def ask(self, request: ApprovalRequest, address: ChatAddress, person: str | None) -> Answer:
        if request.grantable and await self.records.granted(request.session_id, request.tool, request.action):
            return Answer(Verdict.GRANTED)
        now = self.clock()
        held = await self.records.create(
            Held(
                code="",
                session_key=request.session_key,
                session_id=request.session_id,
                tool=request.tool,
                action=request.action,
                findings=tuple((finding.rule, finding.what) for finding in request.findings),
                platform=address.platform,
                chat_id=address.chat_id,
                thread_id=address.thread_id,
                person=person,
                state=State.PENDING,
                created_at=now,
                expires_at=now + self.timeout,
            )
        )
        await self.audit.record(_entry(held, AuditOutcome.HELD, "; ".join(what for _, what in held.findings)))
        log.info(
            "%s chat %s: a command waits for approval (%s)", address.platform, address.chat_id, held.code
        )
        self._waiting[held.code] = asyncio.Event()
        try:
            await self._post_question(held, address)
            settled = await self._wait(held)
        except BaseException:
            await asyncio.shield(self._withdraw(held.code))
            raise
        finally:
            self._waiting.pop(held.code, None)
        return Answer(VERDICTS[settled.state], settled.decided_by, settled.code)

    async def _post_question(self, held: Held, address: ChatAddress) -> None:
        text = prompt.question(held, self.timeout)
        operations = self.replies.render(address, text, streamed=(), reply_to=None)
        shown = text
        if len(operations) > 1:  # a long command: its parts first, then the question with the buttons
            body = text.rpartition("\n\n")[0]
            shown = prompt.footer(held.code, self.timeout, held.grantable)
            operations = [
                *self.replies.render(address, body, streamed=(), reply_to=None),
                *self.replies.render(address, shown, streamed=(), reply_to=None),
            ]
        last = operations[-1]
        operations[-1] = replace(
            last, text=replace(last.text, buttons=prompt.buttons(held.code, held.grantable))
        )
        ids = await self.replies.queue(operations)
        await self.records.set_prompt(held.code, shown, ids[-1])

    async def _wait(self, held: Held) -> Held:
        """The row once answered, or expired at its deadline."""
        event = self._waiting[held.code]
        polls = 0
        while True:
            current = await self.records.find(held.code)
            if current is not None and current.state is not State.PENDING:
                return current
            remaining = held.expires_at - self.clock()
            if remaining <= 0:
                expired = await self.settle(held.code, State.EXPIRED)
                return expired or await self._found(held.code)  # answered at the last moment
            polls += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, POLL.delay(polls))):
                    await event.wait()
            event.clear()

    async def _withdraw(self, code: str) -> None:
        try:
            await self.settle(code, State.WITHDRAWN)
        except Exception:  # the turn is stopping anyway: the question expires on its own
            log.warning("approval %s: could not withdraw the question", code, exc_info=True)

    async def _found(self, code: str) -> Held:
        found = await self.records.find(code)
        assert found is not None, "a held command's row is never deleted"
        return found

    # --- answering ----------------------------------------------------------------------------------

    async def settle(
        self, code: str, state: State, *, by: str | None = None, by_name: str | None = None
    ) -> Held | None:
        """Answer the pending question ``code`` (a button, a command, the timeout): record it in the audit,
        show it in the chat, wake whoever waits. None when it was answered already."""
        settled = await self.records.decide(code, state, by=by, by_name=by_name)
        if settled is None:
            return None
        detail = prompt.outcome(settled)
        await self.audit.record(replace(_entry(settled, OUTCOMES[state], detail), decided_by=by))
        self.wake(settled.code)
        if self.announce is not None and state is not State.EXPIRED:
            try:
                await self.announce(settled.code)
            except Exception as error:  # the waiting process reads the row anyway, a moment later
                log.info("approval %s: the cluster could not be told (%s)", settled.code, error)
        await self._show_answer(settled)
        return settled

    def wake(self, code: str) -> None:
        """A decision on ``code`` was made (here, or announced by another process)."""
        event = self._waiting.get(code)
        if event is not None:
            event.set()

    async def _show_answer(self, held: Held) -> None:
        """Edit the question's message (the one with the buttons) to say how it was answered."""
        adapter = self.adapters.get(held.platform)
        if held.prompt_outbox_id is None or adapter is None or not adapter.capabilities.can_edit:
            return
        item = await self.outbox.find(held.prompt_outbox_id)
        if item is None or item.platform_message_id is None:
            return  # not sent yet: its buttons answer "decided already" when pressed
        address = ChatAddress(held.platform, held.chat_id, held.thread_id)
        [edit, *_] = self.replies.render(address, prompt.answered(held), streamed=(), reply_to=None)
        await self.replies.queue(
            [
                Outgoing(
                    address,
                    Operation.EDIT,
                    OutboundText(edit.text.text, edit.text.entities),
                    target_message_id=item.platform_message_id,
                )
            ]
        )


@dataclass(frozen=True)
class TurnApprover:
    """``agent.tools.approval.Approver`` for one turn: asks in the chat the turn answers."""

    approvals: Approvals
    address: ChatAddress
    person: str | None

    async def ask(self, request: ApprovalRequest) -> Answer:
        return await self.approvals.ask(request, self.address, self.person)


def _entry(held: Held, outcome: AuditOutcome, detail: str) -> AuditEntry:
    return AuditEntry(
        held.session_key,
        held.session_id,
        held.tool,
        held.action,
        outcome,
        detail=detail,
        person=held.person,
        code=held.code,
    )
