"""``herald insights``: tokens, cache use and cost per session, per purpose and overall.

The purpose breakdown is generic: every purpose the ``requests`` table holds gets a row (main turns,
summaries, cron runs, and whatever later side requests record), labelled readably when known.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from agent.store import PurposeUsage, SessionRecord
from gateway.text.fences import code_block


@dataclass(frozen=True)
class UsageRow:
    label: str
    input_tokens: int  # uncached
    cache_read: int
    cache_write: int
    output_tokens: int
    cost: float
    uncached_cost: float

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_write

    @property
    def hit_ratio(self) -> float:
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def saving(self) -> float:
        return self.uncached_cost - self.cost


def row_for_session(session: SessionRecord) -> UsageRow:
    day = dt.datetime.fromtimestamp(session.updated_at).strftime("%Y-%m-%d")
    title = (session.title or "untitled")[:28]
    return UsageRow(
        label=f"{day} {title}",
        input_tokens=session.input_tokens,
        cache_read=session.cache_read_tokens,
        cache_write=session.cache_write_tokens,
        output_tokens=session.output_tokens,
        cost=session.estimated_cost,
        uncached_cost=session.uncached_cost,
    )


PURPOSE_LABELS = {
    "turn": "main turns",
    "summary": "summaries",
    "cron": "cron runs",
    "subagent": "sub-agents",
    "review": "reviews",
}


def row_for_purpose(totals: PurposeUsage) -> UsageRow:
    usage = totals.usage
    label = PURPOSE_LABELS.get(totals.purpose, totals.purpose)
    return UsageRow(
        label=f"{label} ({totals.requests:,} requests)",
        input_tokens=usage.input_tokens,
        cache_read=usage.cache_read_tokens,
        cache_write=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        cost=totals.cost,
        uncached_cost=totals.uncached_cost,
    )


def total_row(rows: list[UsageRow]) -> UsageRow:
    return UsageRow(
        label="all sessions",
        input_tokens=sum(r.input_tokens for r in rows),
        cache_read=sum(r.cache_read for r in rows),
        cache_write=sum(r.cache_write for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cost=sum(r.cost for r in rows),
        uncached_cost=sum(r.uncached_cost for r in rows),
    )


def format_table(rows: list[UsageRow], first: str = "session") -> str:
    header = (
        f"{first:<40} {'input':>10} {'cache read':>11} {'cache write':>11} {'uncached':>10} "
        f"{'hit':>6} {'cost $':>9} {'saved $':>9}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.label:<40} {row.prompt_tokens:>10,} {row.cache_read:>11,} {row.cache_write:>11,} "
            f"{row.input_tokens:>10,} {row.hit_ratio:>6.1%} {row.cost:>9.4f} {row.saving:>9.4f}"
        )
    return "\n".join(lines)


def render(
    sessions: list[SessionRecord],
    shown: int = 20,
    purposes: list[PurposeUsage] | None = None,
    *,
    markdown: bool = False,
) -> str:
    """Rows for the ``shown`` most recent sessions, then the total over all ``sessions``; then, when
    given, the same requests by purpose. ``markdown`` (a chat, where the reply is Markdown): each table
    in a code block, so it keeps its columns and its header line never becomes a heading."""
    if not sessions:
        return "No sessions yet."
    table = code_block if markdown else str
    rows = [row_for_session(s) for s in sessions]
    total = total_row(rows)
    if len(rows) > shown:
        total = replace(total, label=f"all {len(rows)} sessions")
    lines = [table(format_table([*rows[:shown], total]))]
    if purposes:
        lines.append("")
        lines.append(table(format_table([row_for_purpose(p) for p in purposes], first="by purpose")))
    lines.append(
        f"\nInput column = every prompt token; uncached = neither read from nor written to the cache. "
        f"Caching saved ${total.saving:.4f} of ${total.uncached_cost:.4f}."
    )
    return "\n".join(lines)
