"""The context engine: decides when a session is compressed and carries it out.

``ContextEngine`` is the seam (config ``context.engine``); ``ContextCompressor`` is the built-in
engine. It compresses when the provider-reported prompt reaches ``threshold`` of the window (in the
tool loop) or ``hygiene_threshold`` (before a turn, for chats that grew between turns). The system
prompt and tool list are never touched: the summary is a message, and the session keeps its id.
A failed summary never loses context: the transcript stays, a cooldown starts, and only a request that
could not fit the window at all makes it drop the oldest middle turns (saved, marked inactive). A
summary over a spend limit is not sent and not a failure: the compression is skipped (logged).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from agent.compression.boundaries import (
    Boundaries,
    choose_boundaries,
    prune_tool_outputs,
    repair_tool_pairs,
    summary_budget,
)
from agent.compression.summary import Summarizer, SummaryFailed, summary_instruction, wrap_summary
from agent.history import DROPPED_MARK, SUMMARY_MARK
from agent.model.messages import Message
from agent.model.tokens import estimate_total
from agent.models import ModelInfo
from agent.settings import CompressionSettings
from agent.spending.gate import OverBudget, Refusal
from agent.store import SessionRecord, SessionStore
from agent.usage import Usage

log = logging.getLogger(__name__)

PRUNE_ONLY_SHARE = 0.6  # phase 1 alone is enough when it brings the prompt under 60% of the threshold
FIRST_COOLDOWN = 60.0
MAX_COOLDOWN = 3600.0
DROPPED_NOTE = (
    "[Context note: earlier turns of this conversation were removed to fit the context window because "
    "a summary could not be made. They are still saved; session_search finds them.]"
)

Method = Literal["summary", "pruned", "dropped", "failed", "skipped"]


@dataclass(frozen=True)
class CompressionOutcome:
    method: Method
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    notice: str | None = None  # one line for the user when context was lost or nothing changed
    refused: Refusal | None = None  # "skipped": the spend limit its summary did not fit under

    def line(self) -> str:
        if self.method == "failed":
            return self.notice or "Compression failed; the conversation is unchanged."
        if self.method == "skipped":
            return self.notice or "Compression skipped; the conversation is unchanged."
        return (
            f"Compressed ({self.method}): {self.messages_before} messages, ~{self.tokens_before:,} tokens "
            f"→ {self.messages_after} messages, ~{self.tokens_after:,} tokens."
        )


class ContextEngine(ABC):
    """Keeps a session's context inside its model's window.

    The agent loop calls ``after_response`` after every provider response; the gateway (and the
    terminal) call ``hygiene`` before a turn; ``/compress`` calls ``compress(force=True)``. Every call
    is made while the caller holds the session's lock, so an engine never races itself on one session.
    State that must survive a restart (failures, cooldown, the last prompt size) lives in the store.
    """

    @abstractmethod
    async def after_response(
        self, session: SessionRecord, messages: Sequence[Message], usage: Usage
    ) -> CompressionOutcome | None:
        """Compress when the reported prompt size says so; None when nothing was done."""

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
        model_info: Callable[[str], ModelInfo],
        max_output_tokens: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.summarizer = summarizer
        self.settings = settings
        self.model_info = model_info
        self.max_output_tokens = max_output_tokens
        self.clock = clock  # wall clock: cooldowns are stored and read by other processes

    def context_length(self, session: SessionRecord) -> int:
        return self.model_info(session.model).context_length

    def threshold_tokens(self, session: SessionRecord) -> int:
        return int(self.context_length(session) * self.settings.threshold)

    def fits(self, session: SessionRecord, prompt_tokens: int) -> bool:
        """Whether a request of this size still leaves room for an answer."""
        return prompt_tokens + self.max_output_tokens <= self.context_length(session)

    def in_cooldown(self, session: SessionRecord) -> bool:
        return session.compress_retry_at is not None and self.clock() < session.compress_retry_at

    async def after_response(
        self, session: SessionRecord, messages: Sequence[Message], usage: Usage
    ) -> CompressionOutcome | None:
        # A compatible server that reports no usage: estimate instead.
        prompt_tokens = usage.prompt_tokens or estimate_total(messages)
        if not self.settings.enabled or prompt_tokens < self.threshold_tokens(session):
            return None
        current = await self.store.sessions.get(session.id) or session  # the stored failure state
        if self.in_cooldown(current) and self.fits(current, prompt_tokens):
            return None
        return await self.compress(current, messages, prompt_tokens=prompt_tokens)

    def needs_hygiene(self, session: SessionRecord, messages: Sequence[Message]) -> bool:
        if not self.settings.enabled or len(messages) < self.settings.hygiene_min_messages:
            return False
        if len(messages) > self.settings.hygiene_max_messages:
            return True
        tokens = session.last_prompt_tokens or estimate_total(messages)
        return tokens >= self.context_length(session) * self.settings.hygiene_threshold

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
        threshold = self.threshold_tokens(session)
        # Forced (/compress): the user wants it smaller now, so the tail is just the protected messages.
        tail_budget = 0 if force else int(threshold * self.settings.target_ratio / scale)
        bounds = choose_boundaries(messages, tail_budget, self.settings.protect_last_n)
        if bounds is None:
            return None

        pruned = prune_tool_outputs(messages, before=bounds.tail_start)
        pruned_tokens = estimate_total(pruned) * scale
        if pruned != list(messages) and pruned_tokens <= threshold * PRUNE_ONLY_SHARE:
            return await self._persist(session, messages, pruned, "pruned", tokens_before, scale)
        if self.in_cooldown(session) and not force and self.fits(session, tokens_before):
            return None

        middle = messages[bounds.head_end : bounds.tail_start]
        if all(m.meta.get(SUMMARY_MARK) for m in middle):  # nothing new since the last summary
            if pruned != list(messages):
                return await self._persist(session, messages, pruned, "pruned", tokens_before, scale)
            return None
        budget = summary_budget(int(estimate_total(middle) * scale), self.context_length(session))
        instruction = summary_instruction(
            kept_tail=len(messages) - bounds.tail_start,
            updates_previous=any(m.meta.get(SUMMARY_MARK) for m in middle),
            budget_tokens=budget,
        )
        try:
            text = await self.summarizer.summarize(session, messages, instruction, budget)
        except OverBudget as refusal:  # not a failure: nothing was sent, no cooldown, nothing dropped
            log.info("session %s: compression skipped: %s", session.id, refusal)
            count = len(messages)
            return CompressionOutcome(
                "skipped", count, count, tokens_before, tokens_before,
                notice=f"Compression skipped ({refusal}); the conversation is unchanged.",
                refused=refusal.refusal,
            )  # fmt: skip
        except SummaryFailed as exc:
            return await self._after_failure(
                session, messages, pruned, bounds, tokens_before, scale, str(exc)
            )
        if session.compress_failures or session.compress_retry_at is not None:
            await self.store.sessions.set_compression_state(session.id, failures=0, retry_at=None)
        summary = Message(role="user", content=wrap_summary(text), meta={SUMMARY_MARK: True})
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
        count = session.compress_failures + 1
        cooldown = min(MAX_COOLDOWN, FIRST_COOLDOWN * 2 ** (count - 1))
        retry_at = self.clock() + cooldown
        await self.store.sessions.set_compression_state(session.id, failures=count, retry_at=retry_at)
        log.warning("session %s: summary failed (%s); next try in %.0fs", session.id, reason, cooldown)
        if self.fits(session, tokens_before):
            return CompressionOutcome(
                "failed", len(messages), len(messages), tokens_before, tokens_before,
                notice=f"Compression failed ({reason}); the conversation is unchanged.",
            )  # fmt: skip
        kept = drop_oldest_middle(pruned, bounds, int(self.threshold_tokens(session) / scale))
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
        await self.store.messages.rewrite(session.id, removed, new, reason=f"compressed ({method})")
        tokens_after = int(estimate_total(after) * scale)
        await self.store.usage.set_last_prompt_tokens(session.id, tokens_after)
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
    note = Message(role="user", content=DROPPED_NOTE, meta={DROPPED_MARK: True})
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
    "ContextCompressor",
    "ContextEngine",
    "assign_positions",
    "drop_oldest_middle",
]
