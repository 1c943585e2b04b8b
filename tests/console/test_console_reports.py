"""The console's figures from the database (on SQLite and PostgreSQL): spend per calendar day in the
scheduler's zone, windows and purposes, the chat list sorted and paged by the database, chat names and
people from what the platforms delivered."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from alembic import command

from adapters.base import ChatType, InboundMessage
from agent.api import SpendLedger, day_window, month_window
from agent.db.base import Storage
from agent.db.migrate import alembic_config, migrate
from agent.db.schema import batch_requests, cache_misses, usage_days
from agent.prompt import SystemPrompt
from agent.store import NewSession, SessionStore
from agent.store.spending import add_spend
from agent.usage import RequestUsage, Usage
from gateway.budgets.book import BudgetBook
from gateway.budgets.limits import listed_scope
from gateway.config import BudgetSettings
from gateway.console import reports
from gateway.console.reports import ChatSort, Reports, day_starts
from gateway.console.sources import BudgetSource
from gateway.ledger.inbox import Inbox, InboxEntry
from gateway.tables import chat_people, cron_jobs

BERLIN = ZoneInfo("Europe/Berlin")
NOW = dt.datetime(2026, 3, 30, 12, 0, tzinfo=BERLIN).timestamp()  # the day after a 23-hour day
DAY = 86_400.0


def at(days_ago: int, hour: int = 10) -> float:
    date = dt.datetime.fromtimestamp(NOW, BERLIN).date() - dt.timedelta(days=days_ago)
    return dt.datetime.combine(date, dt.time(hour), tzinfo=BERLIN).timestamp()


async def session(store: SessionStore, session_id: str, key: str, title: str) -> None:
    platform = key.split(":")[0] if not key.startswith("cron:") else "telegram"
    await store.sessions.create(
        NewSession(
            id=session_id, session_key=key, source=platform, platform=platform, title=title,
            system_prompt=SystemPrompt("s", "", ""), tools_json="[]", provider="anthropic", model="m",
        )
    )  # fmt: skip


async def request(
    store: SessionStore, session_id: str, when: float, cost: float, *, purpose: str = "turn", read: int = 0
) -> None:
    usage = Usage(input_tokens=100, output_tokens=10, cache_read_tokens=read)
    await store.usage.record(
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
    return Reports(storage, store, BERLIN, book(storage))


def book(storage: Storage, **budgets: Any) -> BudgetBook:
    settings = BudgetSettings.model_validate(budgets)
    return BudgetBook(settings, SpendLedger(storage), BERLIN, clock=lambda: NOW)


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


def miss(key: str, session_id: str, when: float, tokens: int, usd: float, cause: str) -> dict[str, Any]:
    """A cache-miss event's row, as the cache-miss check stores it."""
    return {
        "session_key": key, "session_id": session_id, "request_id": 1, "purpose": "turn", "model": "m",
        "cause": cause, "expected_tokens": tokens, "read_tokens": 0, "missed_tokens": tokens,
        "missed_usd": usd, "detail": "idle <b>10m</b>", "created_at": when,
    }  # fmt: skip


async def spend(storage: Storage, scope: str, usd: float) -> None:
    """``usd`` spent today (and so this month) by ``scope``, as a request's usage record adds it."""
    day, month = day_window(NOW, BERLIN), month_window(NOW, BERLIN)
    await storage.write(lambda conn: add_spend(conn, [(scope, day.id), (scope, month.id)], usd, NOW))


async def test_the_chat_list_sorts_by_cache_misses_budget_used_and_people(storage: Storage) -> None:
    store = SessionStore(storage)
    for session_id, key in (("a", "telegram:dm:1"), ("b", "telegram:group:-5"), ("c", "cron:j1")):
        await session(store, session_id, key, f"chat {session_id}")
        await request(store, session_id, at(0), 0.1)
    rows = [miss("telegram:group:-5", "b", at(0), 2_000, 0.01, "ttl_expired")] * 3 + [
        miss("cron:j1", "c", at(40), 5_000, 0.02, "evicted")  # long ago: all time counts
    ]
    await storage.write(lambda conn: conn.execute(sa.insert(cache_misses), rows))
    await Inbox(storage).record_batch(
        [
            message("1", "1", "1", kind=ChatType.DIRECT, name="Ada", title=None),
            *(message("-5", str(user), str(n), kind=ChatType.GROUP, name="x", title="Ops")
              for n, user in enumerate([7, 8, 9, 7])),
        ]
    )  # fmt: skip
    await spend(storage, "chat:telegram:dm:1", 1.5)  # 75% of the day's $2
    await spend(storage, "chat:telegram:group:-5", 0.5)  # 10% of its own $5 a day
    await spend(storage, "cron:j1", 4.0)  # a job's runs spend against its job's limits: it has none
    reports = Reports(
        storage, store, BERLIN,
        book(storage, chat={"daily_usd": 2.0}, overrides={"telegram:-5": {"daily_usd": 5.0}, "cron:j1": {}}),
    )  # fmt: skip

    async def order(sort: ChatSort, descending: bool) -> list[str]:
        return [row.session_key for row in (await reports.chats(sort, descending, 1)).rows]

    page = {row.session_key: row for row in (await reports.chats(ChatSort.MISSES, True, 1)).rows}
    assert [page[k].misses for k in ("telegram:group:-5", "cron:j1", "telegram:dm:1")] == [3, 1, 0]
    assert [page[k].people for k in ("telegram:group:-5", "cron:j1", "telegram:dm:1")] == [3, None, 1]
    assert page["telegram:dm:1"].budget_used == pytest.approx(0.75)
    assert page["telegram:group:-5"].budget_used == pytest.approx(0.1)
    assert await order(ChatSort.MISSES, True) == ["telegram:group:-5", "cron:j1", "telegram:dm:1"]
    assert await order(ChatSort.MISSES, False) == ["telegram:dm:1", "cron:j1", "telegram:group:-5"]
    assert await order(ChatSort.PEOPLE, True) == ["telegram:group:-5", "telegram:dm:1", "cron:j1"]
    assert await order(ChatSort.PEOPLE, False) == ["telegram:dm:1", "telegram:group:-5", "cron:j1"]
    assert await order(ChatSort.BUDGET, True) == ["telegram:dm:1", "telegram:group:-5", "cron:j1"]
    assert await order(ChatSort.BUDGET, False) == ["telegram:group:-5", "telegram:dm:1", "cron:j1"]
    one = await reports.chat("telegram:group:-5")
    assert one is not None and (one.misses, one.people, one.name) == (3, 3, "Ops")
    assert one.budget_used == pytest.approx(0.1)


KEYS = [
    "telegram:dm:42", "telegram:group:-100", "telegram:group:-100:topic:7", "telegram:group:-100:topic:8",
    "telegram:group:-1000", "telegram:group:-1_0%:topic:7", "telegram:group:-1x0y:topic:7",
    "discord:group:55", "discord:dm:55", "cli:dm:local", "cron:ab12", "cron:zz",
]  # fmt: skip
OVERRIDES: dict[str, dict[str, float | None]] = {
    "telegram:-100": {"daily_usd": 5.0},
    "telegram:-100:7": {"daily_usd": None, "monthly_usd": 1.0},
    "telegram:group:-100:topic:8": {"daily_usd": 0.5},
    "telegram:42": {"monthly_usd": 3.0},
    "telegram:-1_0%": {"daily_usd": 4.0},
    "cli:dm:local": {"daily_usd": 0.0},
    "discord:55": {"monthly_usd": None},
    "cron:ab12": {"daily_usd": 9.0},
}


async def test_each_chats_budget_share_in_the_list_is_what_its_own_limits_give(storage: Storage) -> None:
    """The chat list decides every chat's limits in SQL; /budget, herald budget and the chat's page decide
    one chat's in Python (gateway.budgets.limits): for every kind of key and override they agree."""
    store = SessionStore(storage)
    limits = {"chat": {"daily_usd": 2.0, "monthly_usd": 10.0}, "cron": {"monthly_usd": 8.0}}
    ledger_book = book(storage, **limits, overrides=OVERRIDES)
    for number, key in enumerate(KEYS):
        await session(store, f"s{number}", key, key)
        await spend(storage, listed_scope(ledger_book.settings, key).key, 0.25 * (number + 1))
    reports = Reports(storage, store, BERLIN, ledger_book)
    page = await reports.chats(ChatSort.BUDGET, True, 1)
    listed = {row.session_key: row.budget_used for row in page.rows}
    source = BudgetSource(ledger_book, storage)
    expected = {key: (await source.chat(key)).used for key in KEYS}
    assert listed == pytest.approx(expected)
    assert expected["telegram:group:-100:topic:7"] == pytest.approx(0.75)  # its topic's monthly $1
    assert expected["cli:dm:local"] == 1.0  # a limit of 0: all of it
    assert expected["telegram:group:-1x0y:topic:7"] == pytest.approx(1.75 / 2)  # % and _ are no wildcards
    assert (expected["cron:ab12"], expected["cron:zz"]) == pytest.approx((2.75 / 8, 3.0 / 8))  # month > day
    assert set(listed.values()) != {None} and len(set(listed.values())) > 5  # the cases differ

    unlimited = Reports(storage, store, BERLIN, book(storage))
    assert {row.budget_used for row in (await unlimited.chats(ChatSort.BUDGET, True, 1)).rows} == {None}


async def test_a_database_from_before_chat_people_counts_them_from_its_inbox(storage: Storage) -> None:
    said = [message("-5", u, str(n), kind=ChatType.GROUP, name="x", title="t") for n, u in enumerate("7878")]
    await Inbox(storage).record_batch(said)

    def back_to_0014(conn: sa.Connection) -> None:  # as a database migrated by the release before
        conn.execute(sa.text("DROP INDEX requests_by_purpose"))  # 0021's (usage_days's goes with its table)
        conn.execute(sa.text("DROP INDEX outbox_by_chat"))  # 0019's index
        conn.execute(sa.text("DROP INDEX outbox_pending_by_chat"))  # 0020's
        conn.execute(sa.text("DROP INDEX outbox_by_message"))  # 0018's index and columns (below)
        usage_days.drop(conn)  # 0017's table and indexes
        for index in ("inbox_by_time", "outbox_by_time", "tool_approvals_by_expiry"):
            conn.execute(sa.text(f"DROP INDEX {index}"))
        batch_requests.drop(conn)  # 0016's table and columns
        added = ("requests.batch", "cron_jobs.batch", "cron_jobs.batch_deadline", "cron_jobs.occurrence",
                 "outbox.delivery", "outbox.delivery_at")  # fmt: skip
        for table, column in (name.split(".") for name in added):
            conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        chat_people.drop(conn)
        command.stamp(alembic_config(conn), "0014")

    await storage.write(back_to_0014)
    await migrate(storage)
    rows = await storage.read(lambda conn: conn.execute(sa.select(chat_people.c.user_id)).scalars().all())
    assert sorted(rows) == ["7", "8"]


async def test_the_budgets_page_sorts_every_scope_by_its_own_limits_a_page_at_a_time(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Budgets page sorts scopes in SQL by the share of their limits; what it shows of each (its
    limits, decided in Python as /budget does) puts them in that same order: the fullest first, then
    those without a limit by what they spent this month; the bot above the first page."""
    limits = {
        "bot": {"daily_usd": 100.0}, "chat": {"daily_usd": 2.0, "monthly_usd": 10.0},
        "cron": {"monthly_usd": 8.0}, "person": {"monthly_usd": None},
    }  # fmt: skip
    people = {"telegram:42": {"monthly_usd": 3.0}, "telegram:43": {"daily_usd": 0.5}}
    ledger_book = book(storage, **limits, overrides={**OVERRIDES, **people})
    scopes = [listed_scope(ledger_book.settings, key).key for key in KEYS]
    scopes += ["person:telegram:42", "person:telegram:43", "person:telegram:44", "person:discord:7"]
    for number, scope in enumerate(scopes):
        await spend(storage, scope, 0.25 * ((number * 7) % len(scopes) + 1))  # amounts out of key order
    await spend(storage, "bot", 1.0)
    monkeypatch.setattr(reports, "PAGE_SIZE", 5)
    source = BudgetSource(ledger_book, storage)

    first = await source.page(1)
    shown = [s for number in range(1, first.pages + 1) for s in (await source.page(number)).scopes]
    assert first.scopes[0].name == "the bot" and first.scopes[0].today.limit_usd == 100.0
    assert [s.kind for s in shown].count("bot") == 1  # above the first page only
    listed = [s for s in shown if s.kind != "bot"]
    assert len(listed) == len(scopes) and first.total == len(scopes) + 1 and first.pages == 4
    expected = sorted(listed, key=lambda s: (s.used is None, -(s.used or 0.0), -s.month.spent_usd, s.name))
    assert [s.name for s in listed] == [s.name for s in expected]
    by_name = {s.name: s for s in listed}
    daily = by_name["person telegram:43"]
    assert daily.used == pytest.approx(daily.today.spent_usd / 0.5)
    assert by_name["person telegram:42"].month.limit_usd == 3.0
    assert by_name["person discord:7"].used is None  # no limit for a person: at the end
    assert [s.used is None for s in listed][-2:] == [True, True]
    assert (await source.page(99)).page == 4  # past the last page: the last
