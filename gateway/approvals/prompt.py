"""What the chat is shown for a held command: the question with its buttons, and the answer after.

Pure functions of the held row: the text is Markdown (rendered per platform like any reply), the
command shown whole in a code block (the owner must see everything they approve).
"""

from __future__ import annotations

import re

from adapters.base import Button
from gateway.approvals.records import Held, State

ONCE = "once"
SESSION = "session"


SESSION_BUTTON = "Allow this command for the session"


def buttons(code: str, grantable: bool) -> tuple[Button, ...]:
    """Approve once / Allow this command for the session (when it may be) / Deny: each the command it
    stands for."""
    once = Button("Approve once", f"/approve {code}", shortcut="y")
    deny = Button("Deny", f"/deny {code}", shortcut="n")
    if not grantable:
        return (once, deny)
    return (once, Button(SESSION_BUTTON, f"/approve {code} {SESSION}", shortcut="s"), deny)


def fenced(text: str) -> str:
    """``text`` in a Markdown code block whose fence no run of backticks inside it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def question(held: Held, timeout: float) -> str:
    """The message that asks: what would run, why it is held, how to answer."""
    reasons = "\n".join(f"• {what}" for _, what in held.findings)
    return (
        f"⚠️ Approval needed: the agent wants to run\n{fenced(held.action)}\n{reasons}\n\n"
        f"{footer(held.code, timeout, held.grantable)}"
    )


def footer(code: str, timeout: float, grantable: bool) -> str:
    session = (
        " (add 'session' to allow exactly this command again for the rest of this session)"
        if grantable
        else " (this one can only be approved once)"
    )
    return (
        f"Approve or deny with the buttons, or /approve {code}{session} or /deny {code}. "
        f"No answer within {_duration(timeout)} is a no."
    )


def outcome(held: Held) -> str:
    """One line saying how a held command was answered (in place of the question's last lines)."""
    who = f" by {held.decided_by_name or held.decided_by}" if held.decided_by else ""
    lines = {
        State.APPROVED_ONCE: f"✅ Approved once{who}.",
        State.APPROVED_SESSION: f"✅ Approved{who}, and this exact command for the rest of this session.",
        State.DENIED: f"⛔ Denied{who}: not run.",
        State.EXPIRED: "⌛ No answer in time: not run.",
        State.WITHDRAWN: "Withdrawn: the answer was stopped before anyone decided.",
        State.PENDING: "Waiting for an answer.",
    }
    return lines[held.state]


def answered(held: Held) -> str:
    """The question's message once answered: its text with the instructions replaced by the outcome."""
    body, _, _ = held.prompt.rpartition("\n\n")
    return f"{body}\n\n{outcome(held)}" if body else outcome(held)


def summary(held: Held, limit: int = 60) -> str:
    """The command in a line, for lists and replies."""
    line = " ".join(held.action.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g} seconds"
    minutes = seconds / 60
    return f"{minutes:g} minutes" if minutes < 120 else f"{minutes / 60:g} hours"
