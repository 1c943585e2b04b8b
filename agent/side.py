"""Side tasks: sub-agents and background reviews that read the parent session's prompt cache.

A side task sends the parent session's exact system blocks and tool list (the stored bytes), then
the messages it needs, then its task as the last user message — so its first request reads the
session's prompt (and, for a review, the whole transcript) from the provider's cache. Hermes' children
build prompts of their own and its review sends a different system block: those read nothing.

A side task never writes into the parent's conversation: its messages live in memory for the task's
duration; only its usage is recorded (purpose ``subagent`` or ``review``) and its tool effects remain
(a review's memory writes show up in the next session's frozen snapshot). Tools it may not use are
refused by the loop, not removed from the schema (removing them would change the cached bytes).

Sub-agents start from a tool call, so the parent's request has already streamed: the cache entry for
the shared prefix exists before the first child asks for it (parallel identical requests all miss).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.agent_settings import AgentSettings
from agent.batching.mode import wait_allowed
from agent.cache_policy import Ttl
from agent.model.messages import Message
from agent.model.provider import Provider, ProviderError, ProviderRequest
from agent.model_calls import ModelCalls
from agent.providers.retry import user_facing_error
from agent.spending.gate import OverBudget
from agent.store import SessionRecord, SessionStore
from agent.tool_runs import run_tool_calls, with_payload
from agent.tools.registry import (
    OPEN,
    Delegate,
    Refuse,
    SideOutcome,
    ToolContext,
    ToolGate,
    ToolRegistry,
    both,
)
from agent.usage import Usage


class Agent(Protocol):
    """What a side task uses of the agent (``agent.loop.Agent`` is one): the session's provider, the
    loop's settings, the road to the model (spend gate, retries, usage record), tools and their
    context, and the store. A protocol, so this module needs nothing of ``agent.loop`` (which builds on
    it: delegation)."""

    settings: AgentSettings
    calls: ModelCalls
    registry: ToolRegistry
    store: SessionStore
    clock: Callable[[], float]  # the time requests are recorded at (their pacing chooses TTLs)

    def provider_for(self, session: SessionRecord) -> Provider: ...

    def tool_context(self, session: SessionRecord, *, depth: int, gate: ToolGate = ...) -> ToolContext: ...

    async def ttls_for(self, session: SessionRecord) -> tuple[Ttl, Ttl]: ...


log = logging.getLogger(__name__)

SUBAGENT = "subagent"
REVIEW = "review"
SKIPPED = "skipped"  # how a side task's error starts when a spend limit stopped it
NEVER_IN_CHILDREN = frozenset({"todo", "cron"})  # they act on the parent's own session or chat

CHILD_PREAMBLE = (
    "[Herald: you are a sub-agent. Work on the task below on your own and answer with the result only; "
    "nobody reads your intermediate messages. Task:]\n\n"
)
REVIEW_TASK = (
    "[Herald: background review] Look back over this conversation. Save to memory what will still "
    "matter in future conversations: the person's preferences, facts about them and their work, "
    "corrections they made, conventions you agreed on. Replace outdated entries instead of adding "
    "near-duplicates, and skip what is already saved or only matters for the current task. Then answer "
    "with one short line saying what you saved (or 'nothing to save')."
)
REVIEW_TOOLS = frozenset({"memory", "skills_list", "skill_view", "session_search"})


@dataclass(frozen=True)
class SideTask:
    purpose: str  # SUBAGENT | REVIEW: how its usage is recorded
    task: str  # the last user message
    prefix: tuple[Message, ...]  # messages sent before the task (a review: the session's history)
    allowed_tools: frozenset[str]
    max_iterations: int
    max_output_tokens: int
    timeout: float
    depth: int  # how deep in delegation this task runs (1 = a child of a turn)
    gate: ToolGate = OPEN  # the parent's: a sub-agent may use no tool its caller may not use now


@dataclass(frozen=True)
class SideResult:
    text: str
    usage: Usage
    iterations: int
    error: str | None = None

    def outcome(self) -> SideOutcome:
        return SideOutcome(
            text=self.text,
            error=self.error,
            input_tokens=self.usage.prompt_tokens,
            cache_read_tokens=self.usage.cache_read_tokens,
            output_tokens=self.usage.output_tokens,
        )


@dataclass
class _Progress:
    """What a side task has spent so far (kept outside the loop so a timeout still reports it)."""

    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    text: str = ""


async def run_side_task(agent: Agent, session: SessionRecord, task: SideTask) -> SideResult:
    """Run ``task`` on ``session``'s prompt; failures end it with ``error`` set, never an exception."""
    progress = _Progress()
    try:  # a task whose requests wait in a batch (a review with agent.review_batch) may wait its deadline
        async with asyncio.timeout(wait_allowed(task.timeout, agent.clock())):
            error = await _loop(agent, session, task, progress)
    except TimeoutError:
        error = f"stopped after {task.timeout:.0f} seconds"
    except OverBudget as refusal:  # the request that would have crossed a limit was not sent
        error = f"{SKIPPED}: {refusal}"
    except ProviderError as failure:
        error = user_facing_error(failure, attempts=failure.attempts)
    return SideResult(progress.text, progress.usage, progress.iterations, error)


async def _loop(agent: Agent, session: SessionRecord, task: SideTask, progress: _Progress) -> str | None:
    """The side task's tool loop; returns why it stopped early (None when it answered)."""
    provider = agent.provider_for(session)
    messages = [*task.prefix, with_payload(provider, Message(role="user", content=task.task))]
    advertised = {tool["name"] for tool in session.tools}
    limits = Refuse(frozenset(advertised - task.allowed_tools))
    context = agent.tool_context(session, depth=task.depth, gate=both(task.gate, limits))
    # Paced like the session's own turns: a review of a chat that pauses writes the history's end
    # with the TTL the chat's next turn needs to still find it.
    prefix_ttl, tail_ttl = await agent.ttls_for(session)
    while progress.iterations < task.max_iterations:
        remaining = task.max_output_tokens - progress.usage.output_tokens
        if remaining <= 0:
            return "used up its output token budget"
        progress.iterations += 1
        request = ProviderRequest(
            session_id=session.id,
            system=session.system_prompt,
            tools=session.tools,
            messages=messages,
            max_tokens=min(agent.settings.max_tokens, remaining),
            cache_policy=agent.settings.cache_policy,
            prefix_ttl=prefix_ttl,
            tail_ttl=tail_ttl,
            # A review's first request ends the session's history with a breakpoint, so the chat's
            # next turn reads the history through its last answer, which this request sent.
            task_appended=bool(task.prefix) and progress.iterations == 1,
        )
        response = await agent.calls.complete(
            provider, request, session=session, purpose=task.purpose, policy=agent.settings.retry
        )
        progress.usage = progress.usage + response.usage
        progress.text = response.text
        if not response.tool_calls:
            return None
        assistant = with_payload(
            provider, Message(role="assistant", content=response.text, tool_calls=response.tool_calls)
        )
        results = await run_tool_calls(
            agent.registry, provider, response.tool_calls, context, advertised=advertised
        )
        messages.extend([assistant, *results])
    return "stopped at its iteration limit"


def delegate_for(agent: Agent, session: SessionRecord, depth: int, gate: ToolGate = OPEN) -> Delegate | None:
    """The delegate capability for tools running at ``depth`` (None where delegation is not allowed);
    its sub-agents' calls are put to ``gate`` too."""
    limits = agent.settings.delegate
    advertised = {tool["name"] for tool in session.tools}
    if "delegate" not in advertised or depth >= limits.max_depth:
        return None

    async def delegate(tasks: Sequence[str]) -> list[SideOutcome]:
        if len(tasks) > limits.max_children:
            raise ValueError(
                f"At most {limits.max_children} tasks per delegate call; merge some or call again."
            )
        child_depth = depth + 1
        allowed = frozenset(advertised - NEVER_IN_CHILDREN)
        if child_depth >= limits.max_depth:
            allowed = allowed - {"delegate"}
        slots = asyncio.Semaphore(limits.max_concurrency)

        async def child(text: str) -> SideOutcome:
            task = SideTask(
                purpose=SUBAGENT,
                task=CHILD_PREAMBLE + text,
                prefix=(),
                allowed_tools=allowed,
                max_iterations=limits.max_iterations,
                max_output_tokens=limits.max_output_tokens,
                timeout=limits.timeout,
                depth=child_depth,
                gate=gate,
            )
            async with slots:
                result = await run_side_task(agent, session, task)
            if result.error:
                log.warning("session %s: a sub-agent ended early: %s", session.id, result.error)
            return result.outcome()

        return list(await asyncio.gather(*(child(text) for text in tasks)))

    return delegate


async def review(
    agent: Agent, session: SessionRecord, *, max_iterations: int, gate: ToolGate = OPEN
) -> SideResult:
    """A background review of ``session``: its transcript as sent, then the review task.

    It may read skills and past sessions and write memory (the session's own scope); nothing else, and
    nothing ``gate`` refuses (what the session's people may use now).
    A completed review marks the session reviewed up to its last message (stored, so the schedule
    survives restarts).
    """
    history = await agent.store.messages.load(session.id)
    if not history:
        return SideResult("", Usage(), 0, "nothing to review")
    task = SideTask(
        purpose=REVIEW,
        task=REVIEW_TASK,
        prefix=tuple(history),
        allowed_tools=REVIEW_TOOLS,
        max_iterations=max_iterations,
        max_output_tokens=agent.settings.max_tokens,
        timeout=agent.settings.delegate.timeout,
        depth=agent.settings.delegate.max_depth,  # a review never delegates
        gate=gate,
    )
    result = await run_side_task(agent, session, task)
    if result.error is None and history[-1].id is not None:
        await agent.store.reviews.mark_reviewed(session.id, history[-1].id)
    return result
