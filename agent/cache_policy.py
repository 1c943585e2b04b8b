"""Where Anthropic ``cache_control`` breakpoints go: a pure policy over the shape of a request.

A request is ``tools → system blocks → messages``. The provider describes that shape, this module
answers which positions get a marker and with which TTL, and the provider applies the markers to a copy
of the wire request. Never more than 4 markers (a fifth is a 400 from the API).

Policies:

- ``layered`` (default): the end of the prefix every chat of the bot shares (tools + stable layer +
  context layer: only the volatile layer is per session), so a new chat reads it from cache; the end
  of the session's system prompt; the end of what the previous request sent (an exact hit however
  many blocks a tool loop added since, so the 20-block lookback never matters); and the end of this
  request (the write the next request will read).
- ``system_and_3``: Hermes Agent's policy, kept for comparison: the last system block plus the last
  three messages.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Ttl = Literal["5m", "1h"]
Policy = Literal["layered", "system_and_3"]
TtlSetting = Literal["5m", "1h", "auto"]

MAX_BREAKPOINTS = 4
FIVE_MINUTES = 300.0
ONE_HOUR = 3600.0
PACING_WINDOW = 24 * ONE_HOUR  # how far back a chat's pauses count for its TTL
PACING_REQUESTS = 200  # at most this many of its latest requests


@dataclass(frozen=True)
class PromptShape:
    """What the policy needs to know about a request: counts and roles, no content."""

    tool_count: int
    system_layers: tuple[str, ...]  # names of the system blocks in order, e.g. ("stable", "volatile")
    message_roles: tuple[str, ...]  # wire roles in order ("user" / "assistant")
    # The last message is a task appended to a conversation that ends just before it (a background
    # review's first request): the breakpoint that would mark the end of the previous request marks
    # the conversation's end instead, so the conversation's next turn reads all the task sent.
    task_appended: bool = False


@dataclass(frozen=True)
class Breakpoint:
    """A marker on the last block of a tool definition, a system block or a message."""

    target: Literal["tool", "system", "message"]
    index: int
    ttl: Ttl


def choose_ttls(setting: TtlSetting, request_times: Sequence[float], now: float) -> tuple[Ttl, Ttl]:
    """TTL for (prefix breakpoints, conversation-tail breakpoints).

    ``request_times`` are when the chat's recent requests were sent (oldest first, over
    :data:`PACING_WINDOW`, all of the chat's sessions). ``auto`` keeps the system prompt for an hour
    (written once per session, read by every later turn, sub-agent and review) and the rolling tail for
    5 minutes, unless the chat has shown that it pauses longer than that but not past an hour: then the
    tail gets 1h too, so the next such pause still finds it cached. 1h markers always precede 5m ones,
    as the API requires.
    """
    if setting == "5m":
        return "5m", "5m"
    if setting == "1h":
        return "1h", "1h"
    return "1h", ("1h" if paces_slowly(request_times, now) else "5m")


def paces_slowly(request_times: Sequence[float], now: float) -> bool:
    """Whether a gap between two requests (or since the last one, up to ``now``) lasted longer than a
    5-minute entry lives but not longer than a 1-hour one: a pause the 1-hour TTL would have bridged.

    Times are when requests were *sent*: the provider writes (and refreshes) an entry when it takes a
    request, so a pause is measured from there, not from when a long answer finished streaming.
    """
    points = [*request_times, now]
    return any(FIVE_MINUTES < later - earlier <= ONE_HOUR for earlier, later in itertools.pairwise(points))


def place_breakpoints(
    shape: PromptShape, policy: Policy, prefix_ttl: Ttl, tail_ttl: Ttl
) -> tuple[Breakpoint, ...]:
    if policy == "system_and_3":
        points = _system_and_3(shape, prefix_ttl)
    else:
        points = _layered(shape, prefix_ttl, tail_ttl)
    assert len(points) <= MAX_BREAKPOINTS, points
    return points


def _layered(shape: PromptShape, prefix_ttl: Ttl, tail_ttl: Ttl) -> tuple[Breakpoint, ...]:
    points: list[Breakpoint] = []
    if shape.system_layers:
        last_system = len(shape.system_layers) - 1
        shared_end = _shared_prefix_end(shape.system_layers)
        if shared_end is not None and shared_end != last_system:
            points.append(Breakpoint("system", shared_end, prefix_ttl))
        points.append(Breakpoint("system", last_system, prefix_ttl))
    elif shape.tool_count:
        points.append(Breakpoint("tool", shape.tool_count - 1, prefix_ttl))

    roles = shape.message_roles
    if roles:
        last = len(roles) - 1
        previous_end = last - 1 if shape.task_appended and last > 0 else _previous_request_end(roles)
        if previous_end is not None and previous_end != last:
            points.append(Breakpoint("message", previous_end, tail_ttl))
        points.append(Breakpoint("message", last, tail_ttl))
    return tuple(points)


def _shared_prefix_end(layers: tuple[str, ...]) -> int | None:
    """Index of the last system block that is the same for every chat of the bot (not volatile)."""
    shared = [index for index, name in enumerate(layers) if name in ("stable", "context")]
    return shared[-1] if shared else None


def _previous_request_end(roles: tuple[str, ...]) -> int | None:
    """Index of the last message the previous request sent: the one before the latest assistant turn.

    In a tool loop the previous request ended just before the assistant's tool call; on a new user
    turn it ended just before the assistant's answer. Either way its final breakpoint sat there.
    """
    for index in range(len(roles) - 1, -1, -1):
        if roles[index] == "assistant":
            return index - 1 if index > 0 else None
    return None


def _system_and_3(shape: PromptShape, ttl: Ttl) -> tuple[Breakpoint, ...]:
    points: list[Breakpoint] = []
    if shape.system_layers:
        points.append(Breakpoint("system", len(shape.system_layers) - 1, ttl))
    count = len(shape.message_roles)
    points.extend(Breakpoint("message", index, ttl) for index in range(max(0, count - 3), count))
    return tuple(points)
