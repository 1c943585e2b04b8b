"""``/approve`` and ``/deny`` for held commands (the buttons send the same commands).

``/approve`` already approves pairing codes; both work, told apart by what follows the command:

- nothing, ``once`` or ``session``: the command waiting in *this* chat (when exactly one waits);
- a 6-character code (``/approve K7QX2M``, ``/approve K7QX2M session``, ``/deny K7QX2M``): that held
  command, wherever it was asked;
- an 8-character code, or ``PLATFORM CODE``: a pairing code (``gateway.access.pairing``), as before.

:func:`answer_held` returns None for the last kind, and the command table handles the pairing.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.approvals import prompt
from gateway.approvals.records import Held, State, is_approval_code
from gateway.approvals.service import Approvals

MODES = (prompt.ONCE, prompt.SESSION)
NOT_FOR_SESSION = (
    "Only once: a command that cannot be read for sure, runs as another user or runs downloaded code "
    "is never approved for the session."
)


@dataclass(frozen=True)
class Decider:
    """Who answers, and where."""

    platform: str
    chat_id: str
    person: str  # platform:user_id
    name: str


async def answer_held(approvals: Approvals, decider: Decider, args: str, *, approve: bool) -> str | None:
    """The reply to ``/approve ARGS`` (``approve``) or ``/deny ARGS`` about a held command; None when
    ``ARGS`` names a pairing code instead."""
    words = args.split()
    mode = prompt.ONCE
    if words and words[-1].lower() in MODES:
        mode = words.pop().lower()
    if len(words) > 1:
        return None  # PLATFORM CODE: a pairing code
    if words:
        code = words[0].replace("-", "").upper()
        if not is_approval_code(code):
            return None
        held = await approvals.records.find(code)
        if held is None:
            return f"No command waits for approval with the code {code}."
    else:
        waiting = await approvals.records.pending_in_chat(decider.platform, decider.chat_id)
        if not waiting:
            hint = " To let a person in, send /approve with their pairing code." if approve else ""
            return f"Nothing waits for approval in this chat.{hint}"
        if len(waiting) > 1:
            listed = "\n".join(f"{held.code}: {prompt.summary(held)}" for held in waiting)
            return f"Several commands wait; answer one with /approve CODE or /deny CODE:\n{listed}"
        held = waiting[0]
    for_session = mode == prompt.SESSION and held.grantable
    state = (State.APPROVED_SESSION if for_session else State.APPROVED_ONCE) if approve else State.DENIED
    settled = await approvals.settle(held.code, state, by=decider.person, by_name=decider.name)
    if settled is None:
        current = await approvals.records.find(held.code)
        return f"That was answered already. {prompt.outcome(current or held)}"
    if approve and mode == prompt.SESSION and not for_session:
        return f"{_told(settled)} {NOT_FOR_SESSION}"
    return _told(settled)


def _told(held: Held) -> str:
    shown = prompt.summary(held)
    if held.state is State.APPROVED_SESSION:
        return (
            f"Approved: {shown}. This exact command runs again without asking until /new; others still ask."
        )
    if held.state is State.APPROVED_ONCE:
        return f"Approved once: {shown}."
    return f"Denied: {shown}. The agent is told so."
