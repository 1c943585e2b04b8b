"""Paid services that are not models: spoken replies, transcription, web search.

Each costs money like a model request and must count the same way: against the spend limits of whoever
pays (the bot, the chat, the person, a job), in ``herald insights`` and the console. A
:class:`ServiceCall` says what the call is and what it may cost before it is sent; only
:meth:`agent.model_calls.ModelCalls.pay` sends one (the gate admits the price first, the usage record
and the settlement follow; ``tests/money/test_spend_seam.py`` reads the code to make sure nothing else does).
Tools reach it through :class:`Payer`, so the tool layer never holds the whole model road.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ServiceCall(Generic[T]):
    """One request to a paid service.

    ``price`` is admitted by the spend gate before ``send`` is called: for a service billed per request
    or per character it is exact, for one billed by duration (transcription) it is the estimate the
    service's answer corrects through ``billed`` (what the answer says it cost; None: ``price``).
    ``characters`` is recorded for services billed per character (speech). A call that raises was not
    billed (these services bill what they delivered) and is not recorded."""

    purpose: str  # the usage record's purpose: "speech", "transcription", "search"
    provider: str
    model: str
    price: float
    send: Callable[[], Awaitable[T]]
    billed: Callable[[T], float] | None = None
    characters: int = 0


class Payer(Protocol):
    """What sends a :class:`ServiceCall` on behalf of a session (``ModelCalls``)."""

    async def pay(self, call: ServiceCall[T], *, session_id: str, timeout: float) -> T:  # noqa: ASYNC109
        """The call's result, after the gate admitted its price; its cost recorded and settled.

        Raises ``OverBudget`` (nothing sent), ``ProviderError(kind="timeout")`` when ``timeout``
        seconds passed, or what ``send`` raised."""
        ...
