"""The console's figures from the database (on SQLite and PostgreSQL): spend per calendar day in the
scheduler's zone, windows and purposes, the chat list sorted and paged by the database, chat names and
people from what the platforms delivered."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from adapters.base import ChatType, InboundMessage
from agent.prompt import SystemPrompt
from agent.storage.base import Storage
from agent.storage.schema import cron_jobs
from agent.store import NewSession, SessionStore
from agent.usage import RequestUsage, Usage
from gateway.console import reports
from gateway.console.reports import ChatSort, Reports, day_starts
from gateway.inbox import Inbox, InboxEntry

BERLIN = ZoneInfo("Europe/Berlin")
NOW = dt.datetime(2026, 3, 30, 12, 0, tzinfo=BERLIN).timestamp()  # the day after a 23-hour day
DAY = 86_400.0


def at(days_ago: int, hour: int = 10) -> float:
    date = dt.datetime.fromtimestamp(NOW, BERLIN).date() - dt.timedelta(days=days_ago)
    return dt.datetime.combine(date, dt.time(hour), tzinfo=BERLIN).timestamp()


async def session(store: SessionStore, session_id: str, key: str, title: str) -> None:
    platform = key.split(":")[0] if not key.startswith("cron:") else "telegram"
    await store.create_session(
        NewSession(
            id=session_id, session_key=key, source=platform, platform=platform, title=title,
            system_prompt=SystemPrompt("s", "", ""), tools_json="[]", provider="anthropic", model="m",
        )
    )  # fmt: skip


async def request(
    store: SessionStore, session_id: str, when: float, cost: float, *, purpose: str = "turn", read: int = 0
) -> None:
    usage = Usage(input_tokens=100, output_tokens=10, cache_read_tokens=read)
    await store.record_request(
        session_id, RequestUsage(purpose, "anthropic", "m", usage, cost, cost * 2), at=when
    )


def message(
    chat_id: str, user_id: str, message_id: str, *, kind: ChatType, name: str, title: str | None
) -> InboxEntry:
    inbound = InboundMessage(
        platform="telegram", chat_id=chat_id, chat_type=kind, user_id=user_id, user_name=name,
        message_id=message_id, text="hi", timestamp=NOW, chat_title=title,
    )  # fmt: skip
    key = f"telegram:{'dm' if kind is ChatType.DIRECT else 'group'}:{chat_id}"
    return InboxEntry(inbound, key)


@pytest.fixture
async def filled(storage: Storage) -> Reports:
    store = SessionStore(storage)
    await session(store, "dm", "telegram:dm:1", "about the weather")
    await request(store, "dm", at(3), 0.25, purpose="summary")
    await request(store, "dm", at(0), 1.0, read=900)
    await request(store, "dm", at(0, 11), 0.5)
    await session(store, "g-old", "telegram:group:-5", "an old question")
    await request(store, "g-old", at(40), 8.0)  # outside the 30 days, inside all time
    await session(store, "g-new", "telegram:group:-5", "<b>the new one</b>")
    await request(store, "g-new", at(1), 2.0)
    await session(store, "job", "cron:j1", "the digest")
    await request(store, "job", at(0, 8), 0.125, purpose="cron")
    await Inbox(storage).record_batch(
        [
            message("1", "1", "1", kind=ChatType.DIRECT, name="Ada", title=None),
            message("-5", "7", "1", kind=ChatType.GROUP, name="Bob", title="Old name"),
            message("-5", "8", "2", kind=ChatType.GROUP, name="Cy", title="Old name"),
            message("-5", "7", "3", kind=ChatType.GROUP, name="Bob", title="Ops <team>"),
        ]
    )
    job = {
        "id": "j1", "name": "digest", "prompt": "p", "schedule": "every 1h", "platform": "telegram",
        "chat_id": "1", "origin_key": "cli:dm:local", "memory_scope": "owner", "created_at": NOW,
        "updated_at": NOW,
    }  # fmt: skip
    await storage.write(lambda conn: conn.execute(sa.insert(cron_jobs).values(**job)))
    return Reports(storage, store, BERLIN)


def test_days_are_calendar_days_in_the_zone_also_across_a_clock_change() -> None:
    starts = day_starts(NOW, BERLIN, days=3)
    assert [date.isoformat() for date, _ in starts] == ["2026-03-28", "2026-03-29", "2026-03-30"]
    assert starts[1][1] - starts[0][1] == DAY
    assert starts[2][1] - starts[1][1] == DAY - 3600  # 29 March 2026 has 23 hours in Berlin


async def test_overview_sums_spend_per_day_window_and_purpose(filled: Reports) -> None:
    overview = await filled.overview(NOW)
    assert len(overview.days) == 30 and overview.days[-1].date == dt.date(2026, 3, 30)
    assert [round(d.usage.cost, 3) for d in overview.days[-4:]] == [0.25, 0.0, 2.0, 1.625]
    assert overview.days[-1].requests == 3
    windows = {w.label: (w.requests, round(w.usage.cost, 3)) for w in overview.windows}
    assert windows == {"today": (3, 1.625), "7 days": (5, 3.875), "30 days": (5, 3.875)}
    assert overview.windows[0].usage.saving == pytest.approx(1.625)  # uncached is twice the cost here
    assert [p.label for p in overview.purposes] == [
        "main turns (3 requests)", "summaries (1 requests)", "cron runs (1 requests)"
    ]  # fmt: skip
    assert overview.all_time.cost == pytest.approx(11.875)  # the 40-day-old request counts here
    assert (overview.sessions, overview.chats) == (4, 3)


async def test_the_chat_list_is_sorted_and_paged_by_the_database(
    filled: Reports, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = await filled.chats(ChatSort.SPEND, True, 1)
    assert [row.session_key for row in page.rows] == ["telegram:group:-5", "telegram:dm:1", "cron:j1"]
    group, direct, job = page.rows
    assert (group.requests, group.sessions, round(group.usage.cost, 3)) == (2, 2, 10.0)
    assert group.title == "<b>the new one</b>"  # the latest session's, as written (escaped on the page)
    assert (group.name, group.people) == ("Ops <team>", 2)  # the latest title the platform gave
    assert (direct.name, direct.people, direct.requests) == ("Ada", 1, 3)
    assert direct.usage.hit_ratio == pytest.approx(900 / 1200)
    assert (job.name, job.people) == ("scheduled job: digest", None)

    by_title = await filled.chats(ChatSort.TITLE, False, 1)
    assert [row.title for row in by_title.rows] == ["<b>the new one</b>", "about the weather", "the digest"]
    by_requests = await filled.chats(ChatSort.REQUESTS, False, 1)
    assert [row.requests for row in by_requests.rows] == [1, 2, 3]

    monkeypatch.setattr(reports, "PAGE_SIZE", 2)
    first, second = await filled.chats(ChatSort.ACTIVE, True, 1), await filled.chats(ChatSort.ACTIVE, True, 2)
    assert (first.total, first.pages, second.page) == (3, 2, 2)
    newest_first = [r.session_key for r in first.rows + second.rows]
    assert newest_first == ["telegram:dm:1", "cron:j1", "telegram:group:-5"]
    assert (await filled.chats(ChatSort.ACTIVE, True, 99)).page == 2  # past the end: the last page


async def test_one_chat_and_its_turns(filled: Reports) -> None:
    chat = await filled.chat("telegram:dm:1")
    assert chat is not None and (chat.requests, chat.sessions, chat.name) == (3, 1, "Ada")
    turns = await filled.turns("telegram:dm:1")
    assert [(t.purpose, t.cost) for t in turns] == [("summary", 0.25), ("turn", 1.0), ("turn", 0.5)]
    assert [t.cost for t in await filled.turns("telegram:dm:1", limit=1)] == [0.5]  # the latest
    assert await filled.chat("telegram:dm:404") is None


async def test_a_request_made_today_shows_at_once_and_a_day_that_ends_moves_into_the_past(
    filled: Reports,
) -> None:
    first = await filled.overview(NOW)
    await request(filled.store, "dm", at(0, 11), 4.0)
    second = await filled.overview(NOW)
    assert second.days[-1].usage.cost == pytest.approx(first.days[-1].usage.cost + 4.0)
    assert second.windows[0].requests == first.windows[0].requests + 1
    assert [d.usage for d in second.days[:-1]] == [d.usage for d in first.days[:-1]]
    tomorrow = await filled.overview(NOW + DAY)
    assert tomorrow.days[-2].usage.cost == pytest.approx(second.days[-1].usage.cost)  # today, now yesterday
    assert tomorrow.days[-1].requests == 0 and tomorrow.windows[1].usage.cost == pytest.approx(7.875)
