"""The spend gate: a model request is admitted only if what it can cost fits every limit of whoever
pays for it, and what it cost is counted after.

Reserve, then settle: :meth:`SpendGate.admit` reserves what the request can cost (its input and a whole
``max_tokens`` answer, ``agent.spending.estimate``) on every limited scope and window of the current
:class:`~agent.spending.charge.Charge` (all or none, atomically where the counters are shared), or, when
less than that is left after what is already spent and reserved by requests in flight, all that is left,
if that pays at least the request's smallest answer (the caller lowers ``max_tokens`` to fit);
:meth:`SpendGate.settle` counts the reported cost (already stored in the database) and drops the
reservation. A request refused raises :class:`OverBudget` before anything was sent: nothing was spent,
nothing is recorded. So no request can carry a scope past its limit: spent plus reserved never exceeds
it, and a request costs at most its reservation (as far as its input is sized right, see
``agent.spending.estimate``).

Every request is counted in its scopes' day and month windows (and its run's, for a scheduled job),
limited or not, so ``/budget`` and ``herald budget`` show spending everywhere. When a limited day's or
month's spending crosses ``warn_at`` of its limit, the listeners hear of it once per scope and window,
over all processes (the database notes who was told); a run's limit warns nobody (the run that reaches
it says so).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from agent.model.provider import ProviderError
from agent.spending.charge import Charge, Scope, current_charge
from agent.spending.counters import Capped, Granted, SpendCounters, SpendKey
from agent.spending.rules import crossed
from agent.spending.windows import CALENDAR, Window, WindowKind, calendar_window, run_window

log = logging.getLogger(__name__)

WARNED = "admins"  # the audience noted when the admins were warned about a scope's window


@dataclass(frozen=True)
class Refusal:
    """A limit a request (or a turn) does not fit under: nothing is left of it (:attr:`used_up`), or
    something is, but less than the request ``needed`` at least (0 for the check before a turn starts)."""

    scope: Scope
    window: Window
    limit: float
    spent: float
    reserved: float  # held by requests in flight, whose cost is not known yet
    needed: float = 0.0  # what the refused request needed at least (0: a turn's check, "anything left?")

    @property
    def left(self) -> float:
        """What is left of the limit for new requests (nothing once spent and held reach it, as
        :func:`~agent.spending.rules.fits` counts)."""
        committed = self.spent + self.reserved
        return self.limit - committed if committed < self.limit else 0.0

    @property
    def used_up(self) -> bool:
        """Whether the limit is spent (nothing fits before its window resets), rather than this request
        needing more than what is left, or requests in flight holding the rest."""
        return self.spent >= self.limit


class OverBudget(ProviderError):
    """A request refused by the gate before it was sent: nothing was spent."""

    def __init__(self, refusal: Refusal) -> None:
        scope, window = refusal.scope, refusal.window
        limit = f"the spend limit of {scope.key} (${refusal.limit:.2f} per {window.kind})"
        reason = f"{limit} is reached"
        if not refusal.used_up:
            needed, left = refusal.needed, refusal.left
            reason = f"a request needing at least ${needed:.4f} would cross {limit}; ${left:.4f} is left"
        super().__init__(reason, retryable=False, kind="budget")
        self.refusal = refusal


@dataclass(frozen=True)
class SpendWarning:
    """A limited scope's window crossed ``warn_at`` of its limit."""

    scope: Scope
    window: Window
    limit: float
    spent: float


WarningListener = Callable[[SpendWarning], Awaitable[None]]


class Notices(Protocol):
    async def note_once(self, scope: str, period: str, audience: str) -> bool:
        """Note that ``audience`` was told about ``scope``'s window ``period``; False if it was before."""
        ...


@dataclass(frozen=True)
class _Limited:
    scope: Scope
    window: Window
    capped: Capped


@dataclass(frozen=True)
class Admission:
    """An admitted request: where its cost counts, its reservation (None: nothing reserved), and what it
    may cost (``granted``: the ``most`` it asked for when nothing limits it)."""

    hold: str | None
    keys: tuple[SpendKey, ...]
    limited: tuple[_Limited, ...]
    granted: float


class SpendGate:
    """Checks and counts what model requests cost. ``default`` is charged for requests made outside any
    :func:`~agent.spending.charge.charging` block; ``clock`` tells which day and month it is (tests
    move it to another time)."""

    def __init__(
        self,
        counters: SpendCounters,
        notices: Notices,
        *,
        zone: dt.tzinfo,
        warn_at: float | None,
        default: Charge,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.counters = counters
        self.notices = notices
        self.zone = zone
        self.warn_at = warn_at
        self.default = default
        self.clock = clock
        self._listeners: list[WarningListener] = []
        self._calendars: dict[WindowKind, Window] = {}

    def on_warning(self, listener: WarningListener) -> None:
        """Call ``listener`` when a scope's window crosses ``warn_at`` of its limit (once per window)."""
        self._listeners.append(listener)

    def charge(self) -> Charge:
        return current_charge() or self.default

    def windows(self, scope: Scope, now: float) -> list[Window]:
        """The windows a cost of ``scope`` counts in now."""
        found = [self._calendar(kind, now) for kind in CALENDAR]
        return [*found, run_window(scope.run)] if scope.run is not None else found

    def _calendar(self, kind: WindowKind, now: float) -> Window:
        """Today's or this month's window, computed once per window (every check asks for them)."""
        known = self._calendars.get(kind)
        if known is None or known.start is None or known.end is None or not known.start <= now < known.end:
            known = self._calendars[kind] = calendar_window(kind, now, self.zone)
        return known

    def _plan(self, charge: Charge, now: float) -> tuple[tuple[SpendKey, ...], tuple[_Limited, ...]]:
        keys: list[SpendKey] = []
        limited: list[_Limited] = []
        for scope in charge.scopes:
            by_kind = {window.kind: window for window in self.windows(scope, now)}
            keys.extend((scope.key, window.id) for window in by_kind.values())
            for limit in scope.limits:
                window = by_kind.get(limit.window)
                if window is not None:
                    limited.append(_Limited(scope, window, Capped((scope.key, window.id), limit.usd)))
        return tuple(keys), tuple(limited)

    async def admit(
        self, least: float, most: float | None = None, *, lasts: float | None = None
    ) -> Admission:
        """Reserve up to ``most`` (default: ``least``), at least ``least``, for a request of the current
        charge; raises :class:`OverBudget`. ``lasts``: seconds the reservation must live (a batch request
        waits hours; None: the counters' own)."""
        most = least if most is None else max(least, most)
        charge = self.charge()
        keys, limited = self._plan(charge, self.clock())
        if charge.exempt or not limited:
            return Admission(None, keys, limited, most)
        hold = secrets.token_hex(8)
        taken = await self._take(limited, least, most, hold, lasts)
        if isinstance(taken, Refusal):
            log.info(
                "refused a model request: %s has spent $%.4f (+$%.4f in flight) of $%.2f this %s; the "
                "request needed at least $%.4f", taken.scope.key, taken.spent, taken.reserved,
                taken.limit, taken.window.kind, least,
            )  # fmt: skip
            raise OverBudget(replace(taken, needed=least))
        return Admission(hold, keys, limited, taken)

    async def check(self, charge: Charge) -> Refusal | None:
        """Before a turn starts: the first limit of ``charge`` with nothing left, if any."""
        if charge.exempt:
            return None
        _, limited = self._plan(charge, self.clock())
        taken = await self._take(limited, 0.0, 0.0, None) if limited else None
        return taken if isinstance(taken, Refusal) else None

    async def _take(
        self,
        limited: tuple[_Limited, ...],
        least: float,
        most: float,
        hold: str | None,
        lasts: float | None = None,
    ) -> Refusal | float:
        shortfall = await self.counters.take([item.capped for item in limited], least, most, hold, lasts)
        if isinstance(shortfall, Granted):
            return shortfall.amount
        item = next(item for item in limited if item.capped == shortfall.capped)
        standing = shortfall.standing
        return Refusal(item.scope, item.window, item.capped.limit, standing.spent, standing.reserved)

    async def settle(self, admission: Admission, cost: float, totals: Mapping[SpendKey, float]) -> None:
        """Count ``cost`` (stored in the database, which says the windows now stand at ``totals``) and
        drop the reservation; warn about windows that crossed ``warn_at``."""
        await self.counters.settle(admission.hold, admission.keys, cost)
        if self.warn_at is None:
            return
        for item in admission.limited:
            if item.window.kind == "run":  # a run that reaches its limit says so itself; hourly DMs would not
                continue
            total = totals.get(item.capped.key)
            if total is None or not crossed(total - cost, total, self.warn_at * item.capped.limit):
                continue
            if await self.notices.note_once(item.scope.key, item.window.id, WARNED):
                await self._warn(SpendWarning(item.scope, item.window, item.capped.limit, total))

    async def release(self, admission: Admission) -> None:
        """The request was not sent, or failed: its reservation is dropped, nothing is counted."""
        if admission.hold is not None:
            await self.counters.release(admission.hold, admission.keys)

    async def _warn(self, warning: SpendWarning) -> None:
        for listener in self._listeners:
            try:
                await listener(warning)
            except Exception:  # a warning that could not be sent must not fail the request that paid
                log.exception("could not send the spend warning for %s", warning.scope.key)

    async def aclose(self) -> None:
        await self.counters.aclose()
