"""Small test helpers shared by several test modules."""

from __future__ import annotations

import hashlib
from pathlib import Path

from agent.loop import TurnEvent
from agent.session import SessionSpec
from agent.store import SessionRecord
from gateway.runtime import Runtime
from tests.emulator import RecordedRequest

PROJECT_NOTES = "# Project notes\n\n" + "".join(
    f"- Convention {i}: modules stay small, names are precise, and every public function is typed.\n"
    for i in range(80)
)


def write_project_notes() -> None:
    """An AGENTS.md in the working directory (~1,900 tokens): with it the prompt is over the model's
    minimum cacheable length from the first request, as it is for users with project notes or skills.
    Herald's bare prompt (~900 tokens) is under claude-sonnet-4-6's 2048-token minimum."""
    Path("AGENTS.md").write_text(PROJECT_NOTES)


SPEC = SessionSpec(session_key="test:chat", source="test", platform="terminal")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prompt_hashes(requests: list[RecordedRequest]) -> set[tuple[str, str]]:
    """Distinct (system, tools) byte hashes among ``requests``: 1 means every request sent the same."""
    return {(sha(r.system_json), sha(r.tools_json)) for r in requests}


def token_hit_ratio(requests: list[RecordedRequest]) -> float:
    ok = [r for r in requests if r.status == 200 and r.error is None]
    total = sum(r.prompt_tokens for r in ok)
    return sum(r.cache_read for r in ok) / total if total else 0.0


async def new_session(runtime: Runtime) -> SessionRecord:
    return (await runtime.new_session(SPEC)).record


class EventLog:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)
