"""The summary call: one request that condenses the middle of a conversation.

On the main model the request is the session's own request — same system blocks, same tools, the
history exactly as last sent — with the task appended as a final user message, so everything but
the task is read from the prompt cache. An auxiliary model cannot read that cache, so it gets a
compact transcript (long tool outputs pruned) in a single message instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.cache_policy import Policy, TtlSetting, choose_ttls
from agent.compression.boundaries import PRUNE_MIN_CHARS, PRUNED_TOOL_OUTPUT
from agent.model.messages import Message
from agent.model.provider import Provider, ProviderError, ProviderRequest
from agent.model_calls import ModelCalls
from agent.models import ModelInfo
from agent.prompt import SystemPrompt
from agent.providers.pool import ProviderKey, ProviderPool
from agent.providers.retry import RetryPolicy
from agent.spending.gate import OverBudget
from agent.store import SessionRecord

log = logging.getLogger(__name__)

SUMMARY_PREFIX = (
    "[Context summary: earlier turns of this conversation were compacted to save space. The full "
    "messages are still saved; session_search finds them.]"
)
SECTIONS = (
    "## Goal\n## Constraints & Preferences\n## Progress\n### Done\n### In Progress\n### Blocked\n"
    "## Key Decisions\n## Relevant Files\n## Next Steps\n## Critical Context"
)
AUXILIARY_SYSTEM = (
    "You write precise, structured summaries of conversations between a user and an AI assistant, "
    "so the assistant can continue the work from the summary alone."
)


# One attempt per model: a failed summary is retried once, on the session's own model (``summarize``).
ONE_ATTEMPT = RetryPolicy(max_retries=0, base_delay=0.0)


class SummaryFailed(Exception):
    """Both summary attempts failed; the transcript is left as it was."""


@dataclass(frozen=True)
class SummaryModel:
    provider: Provider
    info: ModelInfo
    reads_session_cache: bool  # the session's own model: send the session's request plus the task


def summary_instruction(kept_tail: int, updates_previous: bool, budget_tokens: int) -> str:
    previous = (
        " The conversation already contains an earlier summary (the message starting with "
        "'[Context summary'). Write an updated summary: keep everything from it that is still "
        "relevant and add what happened since."
        if updates_previous
        else ""
    )
    return (
        "[Herald: context compression] Summarize this conversation for your own later use. The first "
        f"exchange and the last {kept_tail} messages stay verbatim; everything between them will be "
        f"replaced by your summary.{previous}\n\nUse exactly these sections:\n{SECTIONS}\n\n"
        "Be concrete: names, numbers, paths, commands, and decisions with their reasons. For images and "
        "documents shared in the part you summarize, say what they showed insofar as it still matters: "
        "the files themselves leave with that part. Do not call tools. "
        f"Stay under about {budget_tokens:,} tokens."
    )


def wrap_summary(text: str) -> str:
    return f"{SUMMARY_PREFIX}\n\n{text.strip()}"


def render_transcript(messages: Sequence[Message]) -> str:
    """The conversation as plain text for a model that cannot read the session's cache."""
    lines = []
    for message in messages:
        if message.role == "tool":
            content = message.content
            if len(content) > PRUNE_MIN_CHARS:
                content = PRUNED_TOOL_OUTPUT
            lines.append(f"TOOL RESULT ({message.tool_name}): {content}")
            continue
        files = " ".join(media.label() for media in message.media)
        text = f"{files} {message.content}".strip() if files else message.content
        if text:
            lines.append(f"{message.role.upper()}: {text}")
        lines.extend(f"ASSISTANT called {c.name}({c.arguments_json})" for c in message.tool_calls)
    return "\n\n".join(lines)


class Summarizer:
    """Makes the summary call: the auxiliary model first when configured, then the session's own.

    The session's own model is the one it was built for (from the provider pool); only that model can
    read the session's cache, so only it gets the session's own request plus the task.
    """

    def __init__(
        self,
        *,
        calls: ModelCalls,
        pool: ProviderPool,
        model_info: Callable[[str], ModelInfo],
        auxiliary: ProviderKey | None,
        timeout: float,
        cache_policy: Policy,
        cache_ttl: TtlSetting,
    ) -> None:
        self.calls = calls
        self.pool = pool
        self.model_info = model_info
        self.auxiliary = auxiliary
        self.timeout = timeout
        self.cache_policy = cache_policy
        self.cache_ttl = cache_ttl

    def _models(self, session: SessionRecord) -> list[SummaryModel]:
        own = ProviderKey(session.provider, session.model)
        main = SummaryModel(self.pool.get(own), self.model_info(session.model), reads_session_cache=True)
        if self.auxiliary is None or self.auxiliary == own:
            return [main, main]
        auxiliary = SummaryModel(
            self.pool.get(self.auxiliary), self.model_info(self.auxiliary.model), reads_session_cache=False
        )
        return [auxiliary, main]

    async def summarize(
        self, session: SessionRecord, history: Sequence[Message], instruction: str, max_tokens: int
    ) -> str:
        """Return the summary text; on an error or timeout retry once (on the session's own model).

        A summary over a spend limit is not tried on another model: ``OverBudget`` is raised (the same
        limits apply to it)."""
        failure: Exception | None = None
        for model in self._models(session):
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._attempt(model, session, history, instruction, max_tokens)
            except OverBudget:
                raise
            except (ProviderError, TimeoutError, ValueError) as exc:
                failure = exc
                log.warning("session %s: summary by %s failed: %s", session.id, model.provider.model, exc)
        raise SummaryFailed(str(failure))

    async def _attempt(
        self,
        model: SummaryModel,
        session: SessionRecord,
        history: Sequence[Message],
        instruction: str,
        max_tokens: int,
    ) -> str:
        task = Message(role="user", content=instruction)
        if model.reads_session_cache:
            prefix_ttl, tail_ttl = choose_ttls(self.cache_ttl, (), 0.0)
            request = ProviderRequest(
                session_id=session.id,
                system=session.system_prompt,
                tools=session.tools,
                messages=[*history, task],
                max_tokens=max_tokens,
                cache_policy=self.cache_policy,
                prefix_ttl=prefix_ttl,
                tail_ttl=tail_ttl,
            )
        else:
            transcript = Message(role="user", content=f"{render_transcript(history)}\n\n---\n\n{instruction}")
            request = ProviderRequest(
                session_id=session.id,
                system=SystemPrompt(stable=AUXILIARY_SYSTEM, context="", volatile=""),
                tools=(),
                messages=[transcript],
                max_tokens=max_tokens,
            )
        response = await self.calls.complete(
            model.provider, request, session=session, purpose="summary", policy=ONE_ATTEMPT
        )
        if not response.text.strip():
            raise ValueError("the summary came back empty")
        return response.text
