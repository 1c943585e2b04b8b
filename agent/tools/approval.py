"""Asking the owner before a dangerous action: what a tool asks, and what it may be told.

The agent knows no chat: a tool that needs a yes asks the :class:`Approver` of the turn it runs in
(``ToolContext.approver``), which the gateway provides (it shows the question with buttons in the chat
the turn answers, and waits for the owner). Where nobody can be asked — a scheduled run, a sub-agent,
a background review — there is no approver, and the action is refused with :data:`NOBODY_TO_ASK`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

# What "Approve for this session" never covers (rules of ``agent.hands.rules``): the owner approves these
# one command at a time.
NOT_FOR_SESSION = frozenset({"opaque", "superuser", "shell_pipe", "downloaded_code", "fork_bomb"})


class Verdict(StrEnum):
    APPROVED_ONCE = "approved_once"
    APPROVED_SESSION = "approved_session"  # this time, and the same action again for the rest of the session
    GRANTED = "granted"  # the session's owner approved exactly this action for the session earlier
    DENIED = "denied"
    EXPIRED = "expired"  # no answer within tools.approval_timeout
    NOBODY = "nobody"  # nobody to ask in this context

    @property
    def approved(self) -> bool:
        return self in (Verdict.APPROVED_ONCE, Verdict.APPROVED_SESSION, Verdict.GRANTED)


@dataclass(frozen=True)
class Finding:
    """Why an action waits for the owner: the rule that holds it, in the words the owner is shown."""

    rule: str  # a built-in rule (``tools.approval_rules``), or "pattern:NAME" for one of the owner's
    what: str  # what the owner is shown: the rule's words and the part of the command

    def line(self) -> str:
        return self.what


@dataclass(frozen=True)
class ApprovalRequest:
    session_id: str
    session_key: str
    tool: str  # "terminal"
    action: str  # exactly what will run
    findings: tuple[Finding, ...]  # why it is held (never empty)

    @property
    def rules(self) -> frozenset[str]:
        return frozenset(finding.rule for finding in self.findings)

    @property
    def grantable(self) -> bool:
        """Whether the owner may allow it for the session: never what cannot be read for sure, runs as
        another user or runs downloaded or piped-in code (those are approved one at a time)."""
        return grantable(self.rules)


def grantable(rules: frozenset[str]) -> bool:
    """Whether a command held for ``rules`` may be allowed for the rest of a session."""
    return not rules & NOT_FOR_SESSION


@dataclass(frozen=True)
class Answer:
    verdict: Verdict
    by: str | None = None  # who decided (platform:user_id); None for a timeout or a grant
    code: str | None = None  # the approval's code (its record in the audit)


class Approver(Protocol):
    """Who may say yes in the context a tool runs in."""

    @property
    def person(self) -> str | None:
        """Who the turn acts for (platform:user_id), for the audit; None when nobody in particular."""
        ...

    async def ask(self, request: ApprovalRequest) -> Answer:
        """Hold the action until it is approved, denied or the wait ends; cancelling the turn withdraws
        the question. Raises ``StorageError`` when the decision cannot be recorded."""
        ...


NOBODY_TO_ASK = (
    "Not run: this command needs the owner's approval ({why}), and nobody can be asked here (a scheduled "
    "job, a sub-agent). Run it from a chat with the owner instead, or do without it."
)


def outcome_for_model(answer: Answer, request: ApprovalRequest, timeout: float) -> str:
    """The tool's result when the action does not run: what happened, and what to do now."""
    why = "; ".join(finding.what for finding in request.findings)
    if answer.verdict is Verdict.DENIED:
        return (
            f"Not run: the owner denied it ({why}). Do not try to reach the same result another way; "
            "ask them what they want instead."
        )
    if answer.verdict is Verdict.EXPIRED:
        return (
            f"Not run: the owner did not answer within {timeout:.0f} seconds, which counts as a no ({why}). "
            "Tell them what you wanted to run and why, and let them decide."
        )
    return NOBODY_TO_ASK.format(why=why)
