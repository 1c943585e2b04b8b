"""A busy bot's history written straight into the database, for the console benchmark and its tests.

Chats of every kind (direct chats, groups, Discord channels, scheduled jobs), each with one to three
sessions, each session with its provider requests (turns with cache reads and writes, summaries,
sub-agents, reviews, cron runs) spread over the last 60 days, the inbox rows the platforms delivered
(so chat names and people can be counted), a cache-miss event on about one request in 30, and what
every scope spent today and this month (``spend_windows``, as the spend gate adds it up). Rows are
inserted in batches, not through the agent: seeding 10,000 sessions takes seconds, not hours.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agent.cache_misses.diagnosis import CAUSES
from agent.db.base import Storage
from agent.db.schema import cache_misses, requests, sessions, spend_windows
from agent.prompt import SystemPrompt
from agent.spending.windows import day_window, month_window
from gateway.tables import chat_people, cron_jobs, inbox

DAY = 86_400.0
BATCH = 2_000
PURPOSES = ("turn", "turn", "turn", "turn", "turn", "turn", "summary", "subagent", "review")
PROMPT = SystemPrompt(stable="You are Herald.", context="", volatile="").to_json()


@dataclass(frozen=True)
class Seeded:
    sessions: int
    chats: int
    requests: int
    inbox: int
    misses: int
    spend_windows: int


def _chat_key(rng: random.Random, index: int) -> tuple[str, str, str, str]:
    """(session_key, platform, chat_id, chat_type) of chat number ``index``."""
    kind = rng.random()
    if kind < 0.65:
        chat = str(100_000 + index)
        return f"telegram:dm:{chat}", "telegram", chat, "direct"
    if kind < 0.85:
        chat = str(-1_000_000 - index)
        return f"telegram:group:{chat}", "telegram", chat, "group"
    if kind < 0.97:
        chat = str(900_000_000 + index)
        return f"discord:group:{chat}", "discord", chat, "group"
    job = f"j{index:05d}"
    return f"cron:{job}", "telegram", job, "cron"


def _batches(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]


async def seed(
    storage: Storage,
    *,
    sessions_wanted: int = 10_000,
    requests_per_session: int = 20,
    now: float,
    seed: int = 7,
    zone: dt.tzinfo = dt.UTC,
) -> Seeded:
    """Write ``sessions_wanted`` sessions and their requests, inbox rows, cache misses and spending
    (days and months in ``zone``), ending at ``now``."""
    rng = random.Random(seed)
    session_rows: list[dict[str, Any]] = []
    request_rows: list[dict[str, Any]] = []
    inbox_rows: list[dict[str, Any]] = []
    job_rows: list[dict[str, Any]] = []
    chat = 0
    while len(session_rows) < sessions_wanted:
        key, platform, chat_id, kind = _chat_key(rng, chat)
        chat += 1
        if kind == "cron":
            job_rows.append(_job(chat_id, now))
        for _ in range(min(rng.randint(1, 3), sessions_wanted - len(session_rows))):
            session_id = f"s{len(session_rows):06d}"
            started = now - rng.uniform(0, 60 * DAY)
            totals = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0}
            cost = uncached = 0.0
            at = started
            for _ in range(requests_per_session):
                at = min(now, at + rng.uniform(30, 3_600))
                request = _request(rng, session_id, "cron" if kind == "cron" else rng.choice(PURPOSES), at)
                request_rows.append(request)
                totals["input_tokens"] += request["input_tokens"]
                totals["output_tokens"] += request["output_tokens"]
                totals["cache_read_tokens"] += request["cache_read_tokens"]
                totals["cache_write_tokens"] += request["cache_write_5m_tokens"]
                cost += request["estimated_cost"]
                uncached += request["uncached_cost"]
            session_rows.append(
                {
                    "id": session_id,
                    "session_key": key,
                    "source": platform,
                    "platform": platform,
                    "chat_id": chat_id,
                    "user_id": chat_id if kind == "direct" else None,
                    "title": f"question number {len(session_rows)} about the weather",
                    "system_prompt": PROMPT,
                    "tools_json": "[]",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-6",
                    "created_at": started,
                    "updated_at": at,
                    "message_count": 2 * requests_per_session,
                    "request_count": requests_per_session,
                    "estimated_cost": cost,
                    "uncached_cost": uncached,
                    **totals,
                }
            )
            if kind != "cron":
                inbox_rows += _inbox(rng, platform, chat_id, kind, key, started, len(inbox_rows))

    request_rows.sort(key=lambda row: row["created_at"])  # ids grow with time, as when recorded live
    inbox_rows.sort(key=lambda row: row["received_at"])
    keys = {row["id"]: row["session_key"] for row in session_rows}
    miss_rows = [
        _miss(rng, keys[row["session_id"]], request_id, row)
        for request_id, row in enumerate(request_rows, start=1)  # the ids a fresh table gives them
        if rng.random() < 1 / 30
    ]
    people = {(row["session_key"], json.loads(row["message"])["user_id"]) for row in inbox_rows}
    people_rows = [{"session_key": key, "user_id": user, "first_seen": now} for key, user in sorted(people)]
    spend_rows = _spending(request_rows, keys, now, zone)

    def insert(conn: sa.Connection) -> None:
        tables = (
            (sessions, session_rows), (requests, request_rows), (inbox, inbox_rows),
            (chat_people, people_rows), (cache_misses, miss_rows), (spend_windows, spend_rows),
        )  # fmt: skip
        for table, rows in tables:
            for batch in _batches(rows):
                conn.execute(sa.insert(table), batch)
        if job_rows:
            conn.execute(sa.insert(cron_jobs), job_rows)

    await storage.write(insert)
    if storage.dialect == "postgresql":  # what autovacuum does after rows arrive; seeded in one go, now
        await storage.write(lambda conn: conn.exec_driver_sql("ANALYZE"))
    counts = (len(request_rows), len(inbox_rows), len(miss_rows), len(spend_rows))
    return Seeded(len(session_rows), chat, *counts)


def _miss(rng: random.Random, key: str, request_id: int, request: dict[str, Any]) -> dict[str, Any]:
    expected = request["cache_read_tokens"] + request["input_tokens"]
    return {
        "session_key": key,
        "session_id": request["session_id"],
        "request_id": request_id,
        "purpose": request["purpose"],
        "model": request["model"],
        "cause": rng.choice(CAUSES),
        "expected_tokens": expected,
        "read_tokens": request["cache_read_tokens"],
        "missed_tokens": request["input_tokens"],
        "missed_usd": request["input_tokens"] * 2.7 / 1e6,
        "detail": "seeded",
        "created_at": request["created_at"],
    }


def _spending(
    request_rows: list[dict[str, Any]], keys: dict[str, str], now: float, zone: dt.tzinfo
) -> list[dict[str, Any]]:
    """What the bot, each chat (a job's runs: the job) and each person of a direct chat spent today and
    this month, as the spend gate adds each request's cost to its scopes' windows."""
    day, month = day_window(now, zone), month_window(now, zone)
    assert month.start is not None and day.start is not None
    spent: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in request_rows:
        if row["created_at"] < month.start:
            continue
        key = keys[row["session_id"]]
        platform, kind, chat = [*key.split(":"), ""][:3]
        scopes = ["bot", key if platform == "cron" else f"chat:{key}"]  # a job's runs: its job
        if kind == "dm":
            scopes.append(f"person:{platform}:{chat}")
        for period in [month.id] + ([day.id] if row["created_at"] >= day.start else []):
            for scope in scopes:
                spent[(scope, period)][0] += row["estimated_cost"]
                spent[(scope, period)][1] += 1
    return [
        {"scope": scope, "period": period, "spent": usd, "requests": int(count), "updated_at": now}
        for (scope, period), (usd, count) in sorted(spent.items())
    ]


def _request(rng: random.Random, session_id: str, purpose: str, at: float) -> dict[str, Any]:
    prompt = rng.randint(3_000, 40_000)
    read = int(prompt * rng.uniform(0.0, 0.97))
    write = rng.randint(0, prompt - read)
    fresh = prompt - read - write
    output = rng.randint(50, 1_500)
    price_in, price_out = 3.0 / 1e6, 15.0 / 1e6
    cost = fresh * price_in + read * price_in * 0.1 + write * price_in * 1.25 + output * price_out
    return {
        "session_id": session_id,
        "purpose": purpose,
        "provider": "anthropic",
        "model": "claude-sonnet-4-6",
        "input_tokens": fresh,
        "output_tokens": output,
        "cache_read_tokens": read,
        "cache_write_5m_tokens": write,
        "cache_write_1h_tokens": 0,
        "estimated_cost": cost,
        "uncached_cost": prompt * price_in + output * price_out,
        "created_at": at,
    }


def _inbox(
    rng: random.Random, platform: str, chat_id: str, kind: str, key: str, at: float, first: int
) -> list[dict[str, Any]]:
    people = [chat_id] if kind == "direct" else [str(rng.randint(1, 5_000)) for _ in range(rng.randint(2, 8))]
    rows = []
    for n in range(5):
        user = rng.choice(people)
        message = {
            "platform": platform,
            "chat_id": chat_id,
            "chat_type": kind,
            "user_id": user,
            "user_name": f"Person {user}",
            "message_id": str(first + n),
            "text": "hello there",
            "timestamp": at,
            "chat_title": None if kind == "direct" else f"Team {chat_id}",
        }
        rows.append(
            {
                "platform": platform,
                "chat_id": chat_id,
                "message_id": str(first + n),
                "session_key": key,
                "message": json.dumps(message),
                "state": "answered",
                "received_at": at + n,
                "finished_at": at + n,
            }
        )
    return rows


def _job(job_id: str, now: float) -> dict[str, Any]:
    return {
        "id": job_id,
        "name": f"daily digest {job_id}",
        "prompt": "Summarise the news.",
        "schedule": "0 8 * * *",
        "platform": "telegram",
        "chat_id": "100000",
        "origin_key": "cli:dm:local",
        "memory_scope": "owner",
        "next_run_at": now + DAY,
        "created_at": now - 60 * DAY,
        "updated_at": now - 60 * DAY,
    }
