"""Commands held for the owner's yes (``tool_approvals``): the question, where it was asked, the answer.

The answer lives here, not in a process: a button pressed on any process of a cluster, ``/approve``
typed in the chat and the wait running out all change one row, and the first change wins.

Contract:

- :meth:`ApprovalRecords.create` inserts a pending row under a new code (another code is drawn when the
  one drawn is taken).
- :meth:`ApprovalRecords.decide` is a compare-and-set: it changes a *pending* row only, in one
  ``UPDATE``, and returns the row as changed; None when it was decided already (or never existed), so
  of two answers at once exactly one counts.
- :meth:`ApprovalRecords.granted` is whether the session has a row approved for the session with the
  same tool and the same action, character for character (a grant never covers another command).
- Reads see every write that returned before them.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from agent.api import grantable
from agent.db import Storage
from gateway.tables import tool_approvals

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: read off a phone and typed again
CODE_LENGTH = 6  # pairing codes have 8 letters: /approve CODE tells the two apart by length
DRAWS = 5


class State(StrEnum):
    PENDING = "pending"
    APPROVED_ONCE = "approved_once"
    APPROVED_SESSION = "approved_session"
    DENIED = "denied"
    EXPIRED = "expired"  # nobody answered in time
    WITHDRAWN = "withdrawn"  # the turn that asked was stopped first


@dataclass(frozen=True)
class Held:
    """What a held command's row says."""

    code: str
    session_key: str
    session_id: str
    tool: str
    action: str
    findings: tuple[tuple[str, str], ...]  # (rule, what the owner is shown)
    platform: str
    chat_id: str
    thread_id: str | None
    person: str | None
    state: State
    created_at: float
    expires_at: float
    prompt: str = ""
    prompt_outbox_id: int | None = None
    decided_by: str | None = None
    decided_by_name: str | None = None
    decided_at: float | None = None

    @property
    def rules(self) -> frozenset[str]:
        return frozenset(rule for rule, _ in self.findings)

    @property
    def grantable(self) -> bool:
        return grantable(self.rules)


def new_code(choose: Callable[[str], str] = secrets.choice) -> str:
    return "".join(choose(ALPHABET) for _ in range(CODE_LENGTH))


def is_approval_code(text: str) -> bool:
    """Whether ``text`` has the shape of a held command's code (a pairing code is longer)."""
    return len(text) == CODE_LENGTH and all(char in ALPHABET for char in text.upper())


class ApprovalRecords:
    """The ``tool_approvals`` table."""

    def __init__(self, storage: Storage, *, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock

    async def create(self, held: Held) -> Held:
        """Insert ``held`` as pending under a fresh code (its own ``code`` is replaced); returns it."""

        def insert(conn: sa.Connection) -> Held:
            for _ in range(DRAWS):
                code = new_code()
                taken = conn.execute(sa.select(tool_approvals.c.code).where(tool_approvals.c.code == code))
                if taken.first() is None:
                    row = replace(held, code=code, state=State.PENDING)
                    conn.execute(sa.insert(tool_approvals).values(**_values(row)))
                    return row
            raise RuntimeError("no free approval code after several draws")  # 32^6: never in practice

        return await self.storage.write(insert)

    async def set_prompt(self, code: str, prompt: str, outbox_id: int) -> None:
        statement = (
            sa.update(tool_approvals)
            .where(tool_approvals.c.code == code)
            .values(prompt=prompt, prompt_outbox_id=outbox_id)
        )
        await self.storage.write(lambda conn: conn.execute(statement))

    async def decide(
        self, code: str, state: State, *, by: str | None = None, by_name: str | None = None
    ) -> Held | None:
        """Answer the pending row ``code`` with ``state``; the row as answered, or None when it was not
        pending (answered already, or no such code)."""
        statement = (
            sa.update(tool_approvals)
            .where(tool_approvals.c.code == code.upper(), tool_approvals.c.state == State.PENDING.value)
            .values(state=state.value, decided_by=by, decided_by_name=by_name, decided_at=self.clock())
        )

        def update(conn: sa.Connection) -> Held | None:
            if conn.execute(statement).rowcount == 0:
                return None
            return _find(conn, code.upper())

        return await self.storage.write(update)

    async def find(self, code: str) -> Held | None:
        return await self.storage.read(lambda conn: _find(conn, code.upper()))

    async def pending_in_chat(self, platform: str, chat_id: str) -> list[Held]:
        """The chat's questions nobody answered yet, oldest first."""
        query = (
            sa.select(tool_approvals)
            .where(
                tool_approvals.c.platform == platform,
                tool_approvals.c.chat_id == chat_id,
                tool_approvals.c.state == State.PENDING.value,
            )
            .order_by(tool_approvals.c.created_at)
        )
        return await self.storage.read(lambda conn: [_held(row) for row in conn.execute(query)])

    async def granted(self, session_id: str, tool: str, action: str) -> bool:
        """Whether the owner allowed exactly ``action`` by ``tool`` for the rest of session ``session_id``."""
        query = (
            sa.select(tool_approvals.c.code)
            .where(
                tool_approvals.c.session_id == session_id,
                tool_approvals.c.state == State.APPROVED_SESSION.value,
                tool_approvals.c.tool == tool,
                tool_approvals.c.action == action,
            )
            .limit(1)
        )
        return await self.storage.read(lambda conn: conn.execute(query).first() is not None)


def _find(conn: sa.Connection, code: str) -> Held | None:
    row = conn.execute(sa.select(tool_approvals).where(tool_approvals.c.code == code)).first()
    return None if row is None else _held(row)


def _findings(raw: str) -> tuple[tuple[str, str], ...]:
    return tuple((item["rule"], item["what"]) for item in json.loads(raw))


def _findings_json(findings: Sequence[tuple[str, str]]) -> str:
    return json.dumps([{"rule": rule, "what": what} for rule, what in findings], ensure_ascii=False)


def _values(held: Held) -> dict[str, Any]:
    return {
        "code": held.code,
        "session_key": held.session_key,
        "session_id": held.session_id,
        "tool": held.tool,
        "action": held.action,
        "findings": _findings_json(held.findings),
        "platform": held.platform,
        "chat_id": held.chat_id,
        "thread_id": held.thread_id,
        "person": held.person,
        "state": held.state.value,
        "prompt": held.prompt,
        "prompt_outbox_id": held.prompt_outbox_id,
        "created_at": held.created_at,
        "expires_at": held.expires_at,
    }


def _held(row: sa.Row[Any]) -> Held:
    return Held(
        code=row.code,
        session_key=row.session_key,
        session_id=row.session_id,
        tool=row.tool,
        action=row.action,
        findings=_findings(row.findings),
        platform=row.platform,
        chat_id=row.chat_id,
        thread_id=row.thread_id,
        person=row.person,
        state=State(row.state),
        created_at=row.created_at,
        expires_at=row.expires_at,
        prompt=row.prompt,
        prompt_outbox_id=None if row.prompt_outbox_id is None else int(row.prompt_outbox_id),
        decided_by=row.decided_by,
        decided_by_name=row.decided_by_name,
        decided_at=row.decided_at,
    )
