"""The context engine: decides when a session is compressed and carries it out.

``ContextEngine`` is the seam (config ``context.engine``); ``ContextCompressor`` is the built-in
engine. It compresses when the provider-reported prompt reaches ``threshold`` of the window (in the
tool loop) or ``hygiene_threshold`` (before a turn, for chats that grew between turns). The system
prompt and tool list are never touched: the summary is a message, and the session keeps its id.
A failed summary never loses context: the transcript stays, a cooldown starts, and only a request that
could not fit the window at all makes it drop the oldest middle turns (saved, marked inactive).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from agent.compression.boundaries import (
    Boundaries,
    choose_boundaries,
    estimate_total,
    prune_tool_outputs,
    repair_tool_pairs,
    summary_budget,
)
from agent.compression.summary import Summarizer, SummaryFailed, summary_instruction, wrap_summary
from agent.messages import Message
from agent.store import SessionRecord, SessionStore
from agent.usage import Usage

log = logging.getLogger(__name__)

TRACKED_SESSIONS = 1024
PRUNE_ONLY_SHARE = 0.6  # phase 1 alone is enough when it brings the prompt under 60% of the threshold
FIRST_COOLDOWN = 60.0
MAX_COOLDOWN = 3600.0
DROPPED_NOTE = (
    "[Context note: earlier turns of this conversation were removed to fit the context window because "
    "a summary could not be made. They are still saved; session_search finds them.]"
)

Method = Literal["summary", "pruned", "dropped", "failed"]


@dataclass(frozen=True)
class CompressionSettings:
    enabled: bool = True
    threshold: float = 0.50
    target_ratio: float = 0.20
    protect_last_n: int = 20
    hygiene_threshold: float = 0.85
    hygiene_min_messages: int = 4
    hygiene_max_messages: int = 400


@dataclass(frozen=True)
class CompressionOutcome:
    method: Method
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    notice: str | None = None  # one line for the user when context was lost or nothing changed

    def line(self) -> str:
        if self.method == "failed":
            return self.notice or "Compression failed; the conversation is unchanged."
        return (
            f"Compressed ({self.method}): {self.messages_before} messages, ~{self.tokens_before:,} tokens "
            f"→ {self.messages_after} messages, ~{self.tokens_after:,} tokens."
        )


class ContextEngine(ABC):
    """Keeps a session's context inside the model's window.

    The agent loop calls ``on_usage`` after every provider response and then ``should_compress``;
    the gateway calls ``hygiene`` before a turn.
    """

    @abstractmethod
    def on_usage(self, session_id: str, usage: Usage) -> None:
        """Receive the provider-reported usage of a session's latest request."""

    @abstractmethod
    def should_compress(self, session_id: str) -> bool:
        """Is the session due for compression, judging by its latest reported prompt size?"""

    @abstractmethod
    def needs_hygiene(self, session: SessionRecord, messages: Sequence[Message]) -> bool:
        """Before a turn: has the session grown past the hygiene limits?"""

    @abstractmethod
    async def compress(
        self,
        session: SessionRecord,
        messages: Sequence[Message],
        *,
        prompt_tokens: int | None,
        force: bool = False,
    ) -> CompressionOutcome | None:
        """Compress ``messages`` (the session's active history); None when there is nothing to do."""

    async def hygiene(self, session: SessionRecord, messages: Sequence[Message]) -> CompressionOutcome | None:
        """The gateway's safety net, called before running a turn."""
        if not self.needs_hygiene(session, messages):
            return None
        return await self.compress(session, messages, prompt_tokens=session.last_prompt_tokens)


class ContextCompressor(ContextEngine):
    def __init__(
        self,
        *,
        store: SessionStore,
        summarizer: Summarizer,
        settings: CompressionSettings,
        context_length: int,
        max_output_tokens: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.summarizer = summarizer
        self.settings = settings
        self.context_length = context_length
        self.max_output_tokens = max_output_tokens
        self.clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # session id -> (failures, cooldown until)
        self._last_prompt: OrderedDict[str, int] = OrderedDict()  # session id -> reported prompt tokens

    @property
    def threshold_tokens(self) -> int:
        return int(self.context_length * self.settings.threshold)

    def fits(self, prompt_tokens: int) -> bool:
        """Whether a request of this size still leaves room for an answer."""
        return prompt_tokens + self.max_output_tokens <= self.context_length

    def in_cooldown(self, session_id: str) -> bool:
        failures = self._failures.get(session_id)
        return failures is not None and self.clock() < failures[1]

    def on_usage(self, session_id: str, usage: Usage) -> None:
        self._last_prompt[session_id] = usage.prompt_tokens
        self._last_prompt.move_to_end(session_id)
        while len(self._last_prompt) > TRACKED_SESSIONS:  # bounded: a gateway serves many sessions
            self._last_prompt.popitem(last=False)

    def should_compress(self, session_id: str) -> bool:
        prompt_tokens = self._last_prompt.get(session_id, 0)
        if not self.settings.enabled or prompt_tokens < self.threshold_tokens:
            return False
        return not self.in_cooldown(session_id) or not self.fits(prompt_tokens)

    def needs_hygiene(self, session: SessionRecord, messages: Sequence[Message]) -> bool:
        if not self.settings.enabled or len(messages) < self.settings.hygiene_min_messages:
            return False
        if len(messages) > self.settings.hygiene_max_messages:
            return True
        tokens = session.last_prompt_tokens or estimate_total(messages)
        return tokens >= self.context_length * self.settings.hygiene_threshold

    async def compress(
        self,
        session: SessionRecord,
        messages: Sequence[Message],
        *,
        prompt_tokens: int | None,
        force: bool = False,
    ) -> CompressionOutcome | None:
        estimate = max(1, estimate_total(messages))
        tokens_before = prompt_tokens or estimate
        scale = tokens_before / estimate  # provider tokens per estimated token
        # Forced (/compress): the user wants it smaller now, so the tail is just the protected messages.
        tail_budget = 0 if force else int(self.threshold_tokens * self.settings.target_ratio / scale)
        bounds = choose_boundaries(messages, tail_budget, self.settings.protect_last_n)
        if bounds is None:
            return None

        pruned = prune_tool_outputs(messages, before=bounds.tail_start)
        pruned_tokens = estimate_total(pruned) * scale
        if pruned != list(messages) and pruned_tokens <= self.threshold_tokens * PRUNE_ONLY_SHARE:
            return await self._persist(session, messages, pruned, "pruned", tokens_before, scale)
        if self.in_cooldown(session.id) and not force and self.fits(tokens_before):
            return None

        middle = messages[bounds.head_end : bounds.tail_start]
        budget = summary_budget(int(estimate_total(middle) * scale), self.context_length)
        instruction = summary_instruction(
            kept_tail=len(messages) - bounds.tail_start,
            updates_previous=any(m.meta.get("summary") for m in middle),
            budget_tokens=budget,
        )
        try:
            text = await self.summarizer.summarize(session, messages, instruction, budget)
        except SummaryFailed as exc:
            return await self._after_failure(
                session, messages, pruned, bounds, tokens_before, scale, str(exc)
            )
        self._failures.pop(session.id, None)
        self._last_prompt.pop(session.id, None)
        summary = Message(role="user", content=wrap_summary(text), meta={"summary": True})
        kept = [*messages[: bounds.head_end], summary, *messages[bounds.tail_start :]]
        return await self._persist(session, messages, kept, "summary", tokens_before, scale)

    async def _after_failure(
        self,
        session: SessionRecord,
        messages: Sequence[Message],
        pruned: list[Message],
        bounds: Boundaries,
        tokens_before: int,
        scale: float,
        reason: str,
    ) -> CompressionOutcome:
        count = self._failures.get(session.id, (0, 0.0))[0] + 1
        cooldown = min(MAX_COOLDOWN, FIRST_COOLDOWN * 2 ** (count - 1))
        self._failures[session.id] = (count, self.clock() + cooldown)
        if len(self._failures) > TRACKED_SESSIONS:  # bounded: drop the longest-known failure
            self._failures.pop(next(iter(self._failures)))
        log.warning("session %s: summary failed (%s); next try in %.0fs", session.id, reason, cooldown)
        if self.fits(tokens_before):
            return CompressionOutcome(
                "failed", len(messages), len(messages), tokens_before, tokens_before,
                notice=f"Compression failed ({reason}); the conversation is unchanged.",
            )  # fmt: skip
        kept = drop_oldest_middle(pruned, bounds, int(self.threshold_tokens / scale))
        dropped = len(messages) - len(kept) + 1
        outcome = await self._persist(session, messages, kept, "dropped", tokens_before, scale)
        notice = (
            f"The conversation no longer fit the context window and a summary failed, so I set aside the "
            f"{dropped} oldest messages (still saved; session_search finds them)."
        )
        return replace(outcome, notice=notice)

    async def _persist(
        self,
        session: SessionRecord,
        before: Sequence[Message],
        after: list[Message],
        method: Method,
        tokens_before: int,
        scale: float,
    ) -> CompressionOutcome:
        after = assign_positions(repair_tool_pairs(after))
        kept_ids = {m.id for m in after if m.id is not None}
        removed = [m.id for m in before if m.id is not None and m.id not in kept_ids]
        new = [m for m in after if m.id is None]
        await self.store.rewrite_history(session.id, removed, new, reason=f"compressed ({method})")
        tokens_after = int(estimate_total(after) * scale)
        await self.store.set_last_prompt_tokens(session.id, tokens_after)
        log.info(
            "session %s compressed by %s: %d → %d messages, ~%d → ~%d tokens",
            session.id, method, len(before), len(after), tokens_before, tokens_after,
        )  # fmt: skip
        return CompressionOutcome(method, len(before), len(after), tokens_before, tokens_after)


def drop_oldest_middle(messages: Sequence[Message], bounds: Boundaries, budget_tokens: int) -> list[Message]:
    """Fallback: remove the oldest middle messages until the estimate fits ``budget_tokens``.

    A note (a user message) takes their place; the kept middle starts at an assistant message so roles
    still alternate: head (ends with an answer) → note → assistant ….
    """
    head = list(messages[: bounds.head_end])
    middle = list(messages[bounds.head_end : bounds.tail_start])
    tail = list(messages[bounds.tail_start :])
    note = Message(role="user", content=DROPPED_NOTE, meta={"dropped_note": True})
    while middle and (
        middle[0].role != "assistant" or estimate_total([*head, note, *middle, *tail]) > budget_tokens
    ):
        middle.pop(0)
    return [*head, note, *middle, *tail]


def assign_positions(messages: list[Message]) -> list[Message]:
    """Give new messages (no id and no position yet) positions between their stored neighbours."""
    placed = list(messages)
    index = 0
    while index < len(placed):
        if placed[index].id is not None or placed[index].position:
            index += 1
            continue
        end = index
        while end < len(placed) and placed[end].id is None and not placed[end].position:
            end += 1
        low = placed[index - 1].position if index else 0.0
        high = placed[end].position if end < len(placed) else low + 1.0
        step = (high - low) / (end - index + 1)
        for offset in range(index, end):
            placed[offset] = replace(placed[offset], position=low + step * (offset - index + 1))
        index = end
    return placed


__all__ = [
    "CompressionOutcome",
    "CompressionSettings",
    "ContextCompressor",
    "ContextEngine",
    "assign_positions",
    "drop_oldest_middle",
]
