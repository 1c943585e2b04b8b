"""The three-layer system prompt: stable → context → volatile.

Assembly is pure: ``build_system_prompt`` turns already-loaded inputs into text, so the same inputs
always give the same bytes. The result is built once per session, stored with it, and re-sent as is
on every request of that session (see docs/ARCHITECTURE.md, cache invariants 1–2).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from importlib import resources

DEFAULT_IDENTITY = (resources.files("agent") / "defaults" / "SOUL.md").read_text(encoding="utf-8")

CLIENT_INSTRUCTIONS_HEADER = "# Instructions from the person's chat application"


@dataclass(frozen=True)
class SystemPrompt:
    """A session's frozen system prompt. Layers are sent in this order; empty layers are omitted."""

    stable: str
    context: str
    volatile: str

    def layers(self) -> list[tuple[str, str]]:
        """Non-empty layers as (name, text), most stable first."""
        named = [("stable", self.stable), ("context", self.context), ("volatile", self.volatile)]
        return [(name, text) for name, text in named if text]

    def text(self) -> str:
        """All layers as one string, for providers that take a single system message."""
        return "\n\n".join(text for _, text in self.layers())

    def to_json(self) -> str:
        return json.dumps(
            {"stable": self.stable, "context": self.context, "volatile": self.volatile},
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str) -> SystemPrompt:
        data = json.loads(raw)
        return cls(stable=data["stable"], context=data["context"], volatile=data["volatile"])


@dataclass(frozen=True)
class PromptInputs:
    """Everything the prompt is made of, already loaded from disk and config.

    Nothing per chat or per user may go into the fields of the stable layer (identity, tool guidance,
    skills index, platform hint): that layer is shared by every chat of one bot so all of them read it
    from cache. Per-chat facts go in ``chat_context`` (volatile layer). ``platform_hint`` says how to
    write for the platform the session talks on (its adapter's, the same text for every chat there).
    ``instructions`` is the system message a client of the OpenAI-compatible API sent (context layer,
    after the configured one): a client sends the same one with every conversation, so its
    conversations share that layer too.
    """

    identity: str
    tool_guidance: tuple[str, ...]
    skills_index: str
    platform_hint: str
    system_message: str
    project_context: str
    memory_snapshot: str
    started_on: dt.date
    model: str
    provider: str
    chat_context: str = ""
    instructions: str = ""


def format_start_date(day: dt.date) -> str:
    """Date only, on purpose: anything finer would change the prompt bytes during a day."""
    return f"Conversation started: {day:%A}, {day:%B} {day.day}, {day.year}"


MEMORY_HEADER = (
    "# Memory (a snapshot taken when this conversation started; edits made with the memory "
    "tool apply from the next conversation)"
)


def frozen_memory(prompt: SystemPrompt) -> str:
    """The memory snapshot a session's prompt carries ("" when it has none)."""
    start = prompt.volatile.find(MEMORY_HEADER)
    if start < 0:
        return ""
    body = prompt.volatile[start + len(MEMORY_HEADER) :]
    end = body.find("\n\n# ")
    date = body.find("\n\nConversation started:")
    cuts = [index for index in (end, date) if index >= 0]
    return (body[: min(cuts)] if cuts else body).strip()


def build_system_prompt(inputs: PromptInputs) -> SystemPrompt:
    stable_parts = [inputs.identity.strip() or DEFAULT_IDENTITY]
    if inputs.tool_guidance:
        stable_parts.append("# Using your tools\n\n" + "\n".join(f"- {g}" for g in inputs.tool_guidance))
    if inputs.skills_index:
        stable_parts.append(inputs.skills_index.strip())
    if inputs.platform_hint.strip():
        stable_parts.append("# Platform\n\n" + inputs.platform_hint.strip())

    context_parts = [p.strip() for p in (inputs.system_message, inputs.project_context) if p.strip()]
    if inputs.instructions.strip():
        context_parts.append(CLIENT_INSTRUCTIONS_HEADER + "\n\n" + inputs.instructions.strip())

    volatile_parts = []
    if inputs.memory_snapshot.strip():
        volatile_parts.append(MEMORY_HEADER + "\n\n" + inputs.memory_snapshot.strip())
    if inputs.chat_context.strip():
        volatile_parts.append("# This chat\n\n" + inputs.chat_context.strip())
    volatile_parts.append(
        f"{format_start_date(inputs.started_on)}\nModel: {inputs.model} (provider: {inputs.provider})"
    )
    return SystemPrompt(
        stable="\n\n".join(stable_parts),
        context="\n\n".join(context_parts),
        volatile="\n\n".join(volatile_parts),
    )
