"""``herald insights``: tokens, cache use and cost per session, per purpose and overall, and the
cache misses (``agent.cache_misses``) per session by cause.

The purpose breakdown is generic: every purpose the ``requests`` table holds gets a row (main turns,
summaries, cron runs, and whatever later side requests record), labelled readably when known.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from adapters.text.fences import code_block
from agent.api import CAUSE_LABELS, MissTotal, PurposeUsage, SessionRecord, SessionStore, SessionTotals

SHOWN = 20  # the most recent sessions listed one by one (the rest are in the total)


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


def session_label(session: SessionRecord) -> str:
    day = dt.datetime.fromtimestamp(session.updated_at).strftime("%Y-%m-%d")
    return f"{day} {(session.title or 'untitled')[:28]}"


def row_for_session(session: SessionRecord | SessionTotals, label: str = "") -> UsageRow:
    return UsageRow(
        label=label,
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
    "cron (batch)": "cron runs, batch",  # sent through the batch API, at half price (agent.store.usage)
    "subagent": "sub-agents",
    "review": "reviews",
    "review (batch)": "reviews, batch",
    "speech": "spoken",  # spoken replies: billed per character, no tokens
    "transcription": "transcribed",  # voice notes heard: billed per minute of audio
    "search": "web searches",  # web_search queries: billed per search
}


def row_for_purpose(totals: PurposeUsage) -> UsageRow:
    usage = totals.usage
    label = PURPOSE_LABELS.get(totals.purpose, totals.purpose)
    counted = f"{totals.requests:,} requests"
    if totals.characters:
        counted = f"{totals.requests:,} replies, {totals.characters:,} chars"
    return UsageRow(
        label=f"{label} ({counted})",
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


@dataclass(frozen=True)
class MissReport:
    """Cache misses to show: by cause for each session that had any, and for all of them together."""

    by_session: Mapping[str, list[MissTotal]]
    totals: list[MissTotal]


def _cause_line(total: MissTotal) -> str:
    label = f"  {CAUSE_LABELS[total.cause]}"
    return f"{label:<40} {total.count:>7,} {total.missed_tokens:>12,} {total.missed_usd:>9.4f}"


NO_MISSES = "Cache misses: none (every request read from the cache what it should have)."
MISSES_FOOTNOTE = (
    "Tokens = what should have been read from the cache and was paid in full; cost $ = the difference. "
    "What to do about each cause: docs/costs.md, \"Cache misses\"."
)


def format_misses(sessions: Sequence[SessionRecord], report: MissReport) -> str:
    """The shown sessions' misses by cause, then every session's together (a table: see
    :data:`NO_MISSES` when there are none, and :data:`MISSES_FOOTNOTE` for what it means)."""
    header = f"{'cache misses':<40} {'misses':>7} {'tokens':>12} {'cost $':>9}"
    lines = [header, "-" * len(header)]
    for session in sessions:
        totals = report.by_session.get(session.id)
        if totals:
            lines.append(session_label(session))
            lines.extend(_cause_line(total) for total in totals)
    lines.append("all sessions")
    lines.extend(_cause_line(total) for total in report.totals)
    return "\n".join(lines)


def render(
    sessions: Sequence[SessionRecord],
    every: Sequence[SessionRecord | SessionTotals],
    shown: int = SHOWN,
    purposes: list[PurposeUsage] | None = None,
    misses: MissReport | None = None,
    *,
    markdown: bool = False,
) -> str:
    """Rows for the ``shown`` first ``sessions`` (the most recent), then the total over ``every``
    session (all of them, most recent first: each a record, or its totals alone); then, when given, the
    same requests by purpose and the cache misses. ``markdown`` (a chat, where the reply is
    Markdown): each table in a code block, so it keeps its columns and its header line never becomes a
    heading."""
    if not every:
        return "No sessions yet."
    table = code_block if markdown else str
    rows = [row_for_session(s, session_label(s)) for s in sessions[:shown]]
    total = total_row([row_for_session(s) for s in every])
    if len(every) > shown:
        total = replace(total, label=f"all {len(every)} sessions")
    lines = [table(format_table([*rows, total]))]
    if purposes:
        lines.append("")
        lines.append(table(format_table([row_for_purpose(p) for p in purposes], first="by purpose")))
    lines.append(
        f"\nInput column = every prompt token; uncached = neither read from nor written to the cache. "
        f"Caching saved ${total.saving:.4f} of ${total.uncached_cost:.4f}."
    )
    if misses is not None:
        lines.append("")
        if misses.totals:
            lines.extend([table(format_misses(sessions[:shown], misses)), MISSES_FOOTNOTE])
        else:
            lines.append(NO_MISSES)
    return "\n".join(lines)


async def report(
    store: SessionStore, session_key: str | None = None, shown: int = SHOWN, *, markdown: bool = False
) -> str:
    """The whole report, of the home or of one chat (``session_key``): the prompts of the ``shown``
    latest sessions are read, every other session's totals only (a chat or a home of years stays cheap)."""
    if session_key is None:
        listed = await store.sessions.recent(limit=shown)
    else:
        listed = await store.sessions.of_key(session_key, limit=shown)
    every = await store.sessions.totals(session_key)
    by_session = await store.cache_misses.totals_by_session([s.id for s in listed])
    misses = MissReport(by_session, await store.cache_misses.totals(session_key=session_key))
    purposes = await store.usage.by_purpose(session_key)
    return render(listed, every, shown=shown, purposes=purposes, misses=misses, markdown=markdown)
