"""The gateway's side of spend limits: whom to charge, the one line a chat gets per window, and the
admins' warnings. What is shown (``/budget``, ``herald budget``, the console) is read from
:class:`~gateway.budgets.book.BudgetBook` (``Budgets.book``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from adapters.base import InboundMessage
from agent.api import Charge, Refusal, SessionStore, SpendGate, SpendLedger, SpendWarning
from gateway.budgets.book import OWED, TOLD, BudgetBook
from gateway.budgets.limits import run_charge, turn_charge
from gateway.budgets.lines import refusal_line, warning_text
from gateway.chats import chat_of_session_key, person_id, split_person_id
from gateway.config import BudgetSettings
from gateway.delivery.replies import PlatformNotConnected, Replies

log = logging.getLogger(__name__)


class Budgets:
    def __init__(self, settings: BudgetSettings, gate: SpendGate, ledger: SpendLedger) -> None:
        self.settings = settings
        self.gate = gate
        self.ledger = ledger
        self.book = BudgetBook(settings, ledger, gate.zone, clock=lambda: gate.clock())

    # -- who pays -----------------------------------------------------------------------------

    def for_turn(self, message: InboundMessage, session_key: str, *, is_admin: bool) -> Charge:
        return self.for_person(person_id(message.platform, message.user_id), session_key, is_admin=is_admin)

    def for_person(self, person: str, session_key: str, *, is_admin: bool) -> Charge:
        """A turn ``person`` (``platform:user_id``) asked for in the chat of ``session_key``."""
        return turn_charge(self.settings, session_key, person, is_admin=is_admin)

    def for_run(self, job_id: str, run: str, guest: str | None = None) -> Charge:
        """A run of a job; ``guest``: who made it (``platform:user_id``) when that was not an admin."""
        return run_charge(self.settings, job_id, run, guest)

    async def check(self, charge: Charge) -> Refusal | None:
        """Before work starts: the first of the charge's limits with nothing left, if any."""
        return await self.gate.check(charge)

    # -- what people are told -------------------------------------------------------------------

    def line(self, refusal: Refusal) -> str:
        return refusal_line(refusal, self.gate.zone)

    async def owed_warnings(self, admin: str) -> list[str]:
        """The spend warnings ``admin`` (``platform:user_id``) could not be sent, to tell them now (at their
        next message); each is noted as told, over every process, so it is told once."""
        texts = []
        for owed in await self.book.owed_warnings(admin):
            if await self.ledger.note_once(owed.scope, owed.period, f"{TOLD}{admin}"):
                texts.append(owed.text)
        return texts

    async def should_tell(self, refusal: Refusal, audience: str) -> bool:
        """Whether ``audience`` (a chat's session key) is told of ``refusal``. A limit used up: the first
        time in its window only (noted now, over every process), one line per chat and window, never one
        per message. A request that only would have crossed it: every time (a smaller one may still fit,
        so silence would hide why this one was not answered)."""
        if not refusal.used_up:
            return True
        return await self.ledger.note_once(refusal.scope.key, refusal.window.id, audience)


class AdminWarnings:
    """Tells every admin (``gateway.admins``) in their direct chat with the bot that a scope's window
    reached ``budgets.warn_at`` of its limit (the gate calls it once per scope and window). An admin who
    never wrote to the bot directly, or whose platform is away, cannot be written to now: the warning is
    noted as owed to them (the console's Budgets page shows it) and they are told at their next message
    (:meth:`Budgets.owed_warnings`)."""

    def __init__(self, admins: Sequence[str], store: SessionStore, replies: Replies, gate: SpendGate) -> None:
        self.admins = admins
        self.store = store
        self.replies = replies
        self.gate = gate

    async def _owe(self, admin: str, warning: SpendWarning, why: str) -> None:
        log.warning("could not warn %s about %s's spending (%s): they are told at their next message",
                    admin, warning.scope.key, why)  # fmt: skip
        await self.store.spending.note_once(warning.scope.key, warning.window.id, f"{OWED}{admin}")

    async def __call__(self, warning: SpendWarning) -> None:
        text = warning_text(warning, self.gate.zone)
        log.warning("spend warning: %s", text)
        for admin in self.admins:
            platform, user_id = split_person_id(admin)
            session = await self.store.sessions.direct_with(platform, user_id)
            address = chat_of_session_key(session.session_key) if session is not None else None
            if address is None:
                await self._owe(admin, warning, "they never wrote to the bot directly")
                continue
            try:
                await self.replies.post(address, text)
            except PlatformNotConnected as error:
                await self._owe(admin, warning, str(error))
