"""WhatsApp's customer-service window: free-form messages only within 24 hours of the person's last
message; outside it only an approved template may be sent (the Cloud API refuses anything else with
error 131047). Pure: the adapter stores when each person last wrote (its records, so every process and
every restart agrees) and asks here what it may send.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW = 24 * 3600.0  # seconds a person's message keeps the window open
MARGIN = 60.0  # a send this close to the window's end counts as outside: it may arrive after it


@dataclass(frozen=True)
class Window:
    """When a person last wrote (``None``: never, as far as this bot's records know)."""

    last_inbound: float | None

    def closes_at(self) -> float | None:
        return None if self.last_inbound is None else self.last_inbound + WINDOW

    def is_open(self, now: float) -> bool:
        closes = self.closes_at()
        return closes is not None and now < closes - MARGIN


def later(stored: float | None, arrived: float) -> float:
    """The window's start after a message sent at ``arrived``: redeliveries and messages delivered out of
    order never move it back."""
    return arrived if stored is None else max(stored, arrived)


def closed_notice(person: str, template: str | None, closed_at: float | None) -> str:
    """The owner's log line when a reply cannot go out as written (what happened, and what to do)."""
    since = "has not written in the last 24 hours" if closed_at is not None else "has never written"
    if template:
        return (
            f"WhatsApp: {person} {since}, so only an approved template may go to them: sent the template "
            f"'{template}' instead of the reply; the reply itself was not delivered"
        )
    return (
        f"WhatsApp: {person} {since}, so only an approved template may go to them and none is set "
        "(whatsapp.template): the reply was not delivered"
    )
