"""Work for a chat's lane, as data: what to do, for which session, about which stored message.

A lane queues :class:`Work`, not closures, so that what waits in a queue can be written down — kept in
another process's queue, looked at in a test, counted — and the one :class:`gateway.worker.Worker`
decides what doing it means. Work names its stored message by inbox id; the message itself is read
when the work runs (it is in the database from before the work was queued).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class WorkKind(StrEnum):
    MESSAGE = "message"  # answer the stored message with a turn of the agent
    COMMAND = "command"  # run the stored message's slash command in the lane (it touches the session)


@dataclass(frozen=True)
class Work:
    kind: WorkKind
    session_key: str
    inbox_id: int
    resumed: bool = False  # left unanswered by an earlier run: look for what that run did first
