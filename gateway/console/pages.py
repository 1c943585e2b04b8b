"""The console's pages: what each one reads, and what its buttons do.

Actions reuse what the chat commands and ``herald`` use, with the same rules: scheduled jobs change
through ``gateway.cron.manage`` as the owner (the console's user is the bot's owner, like the command
line), pairing through ``gateway.access.pairing`` (an approved person is told at once, as ``/approve`` does),
readiness is ``/readyz``'s own report.

Every page is one bot's: with ``bots:`` each bot has its own :class:`ConsolePages` on its own services
and database, at ``/console/bots/NAME/...`` (``gateway.console.bots``); its links and redirects start at
its ``base``, so they keep the chosen bot.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from adapters.base import Adapter
from agent.api import CAUSE_LABELS, SessionLocks, SessionStore
from agent.db import Storage
from gateway.access.auth import Authorizer
from gateway.access.pairing import Pairing
from gateway.budgets.service import Budgets
from gateway.chats import chat_text, person_id
from gateway.cluster.redis_errors import ANY_REDIS_ERROR
from gateway.console.bots import Fleet, bot_base
from gateway.console.charts import MissMark, TurnFigures, daily_spend, money, turns
from gateway.console.reports import REPLY_LIMIT, ChatSort, Reports
from gateway.console.server import PREFIX, ConsoleWeb, Handler, Notice
from gateway.console.sources import BudgetSource, CacheMissSource, cache_efficiency
from gateway.cron.describe import delivery_text, preview, when
from gateway.cron.jobs import CronJob, DeliveryState, RunStatus
from gateway.cron.manage import CHANGES, COMMAND_LINE, CronError, CronManager, change_job
from gateway.cron.standing import pause_lost
from gateway.delivery.sender import OutboxSender
from gateway.home.facts import GatewayFacts
from gateway.insights import PURPOSE_LABELS, UsageRow, row_for_purpose
from gateway.intake.work import WorkQueue
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Operation, Outbox

if TYPE_CHECKING:
    from gateway.cluster.member import ClusterMember
    from gateway.cluster.redis import Cluster

Readiness = Callable[[], Awaitable[dict[str, object]]]
PROBE_SECONDS = 3.0
REPLIES_SECONDS = 86_400.0  # the health page counts how the replies of the last day fared
CONSOLE_ADMIN = "console"  # who approved, in ``approved_users.approved_by``
# What a chat's recent outbox items are called beside their text (a plain send: nothing).
OPERATIONS = {Operation.SEND_VOICE: "voice note", Operation.EDIT: "edit", Operation.DELETE: "deletion"}
# The colour of an outbox state's pill, and of a delivery status's (both say "sent" and "failed" alike).
PILLS = {"pending": "warn", "sent": "ok", "delivered": "ok", "read": "ok", "failed": "bad"}


class ConsoleRuntime(Protocol):
    """The agent's runtime as the console reads it: its database, sessions, jobs, leases and cluster."""

    @property
    def storage(self) -> Storage: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def cron(self) -> CronManager: ...
    @property
    def locks(self) -> SessionLocks: ...
    @property
    def cluster(self) -> Cluster | None: ...


class ConsoleServices(Protocol):
    """What the console reads of a bot's services (``gateway.wiring`` hands them in): the queues and
    adapters its health page shows, pairing and access, budgets, and the runtime's parts above."""

    @property
    def runtime(self) -> ConsoleRuntime: ...
    @property
    def started_at(self) -> float: ...
    @property
    def adapters(self) -> Mapping[str, Adapter]: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def sender(self) -> OutboxSender: ...
    @property
    def lanes(self) -> WorkQueue: ...
    @property
    def pairing(self) -> Pairing: ...
    @property
    def authorizer(self) -> Authorizer: ...
    @property
    def budgets(self) -> Budgets: ...


@dataclass(frozen=True)
class Dependency:
    name: str
    ok: bool
    detail: str


class ConsolePages:
    """The page handlers (routes relative to ``/console``), on the gateway's services."""

    def __init__(
        self,
        console: ConsoleWeb,
        services: ConsoleServices,
        reports: Reports,
        *,
        budgets: BudgetSource,
        misses: CacheMissSource,
        readiness: Readiness,
        member: ClusterMember | None,
        bot: str | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        self.bot = bot  # None: the one bot without bots:
        self.fleet = fleet  # every bot of the console (bots:)
        self.base = PREFIX if bot is None else bot_base(bot)
        self.web = console
        self.services = services
        self.reports = reports
        self.budgets = budgets
        self.misses = misses
        self.readiness = readiness
        self.member = member

    def render(
        self, request: web.Request, template: str, values: Mapping[str, Any], *, status: int = 200
    ) -> web.Response:
        """A page of this bot: its links start at its base, its times are in its timezone; with bots:,
        the switcher to the others."""
        login, fleet = self.web.logged_in(request), self.fleet
        switcher = () if fleet is None or self.bot is None else fleet.switcher(self.bot, request, login)
        shown = {"base": self.base, "bot": self.bot, "switcher": switcher, "zone": self.timezone, **values}
        return self.web.render(request, template, shown, status=status)

    @property
    def timezone(self) -> dt.tzinfo:
        return self.reports.timezone

    def routes(self) -> dict[str, tuple[str, Handler]]:
        return {
            "/": ("GET", self.overview),
            "/chats": ("GET", self.chats),
            "/chat": ("GET", self.chat),
            "/jobs": ("GET", self.jobs),
            "/jobs/{job_id}/{change}": ("POST", self.change_job),
            "/pairing": ("GET", self.pairing),
            "/pairing/{decision:approve|deny}": ("POST", self.decide_pairing),
            "/pairing/revoke": ("POST", self.revoke),
            "/budgets": ("GET", self.budget_lines),
            "/health": ("GET", self.health),
        }

    # --- overview and chats ----------------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.StreamResponse:
        overview = await self.reports.overview(time.time())
        month = overview.windows[-1].usage
        misses = await self.misses.summary(overview.days[0].start)
        daily = daily_spend([(d.date.isoformat(), d.usage.cost, d.requests) for d in overview.days])
        values = {
            "heading": "Overview",
            "overview": overview,
            "month": month,
            "daily": daily,
            "efficiency": cache_efficiency(month.cache_read, misses.tokens),
            "misses": misses,
            "causes": CAUSE_LABELS,
            "bots": await self.fleet.spend(self.web.logged_in(request)) if self.fleet is not None else [],
            "spend": await self.budgets.bot_spend(),  # with the month's projection at its pace so far
        }
        return self.render(request, "overview.html", values)

    async def chats(self, request: web.Request) -> web.StreamResponse:
        sort = _choice(request.query.get("sort"), ChatSort, ChatSort.SPEND)
        descending = request.query.get("order", "desc") != "asc"
        page = await self.reports.chats(sort, descending, _number(request.query.get("page"), 1))
        return self.render(request, "chats.html", {"heading": "Chats", "page": page})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        key = request.query.get("key", "")
        chat = await self.reports.chat(key) if key else None
        if chat is None:
            text = "There is no chat with that key; pick one from the list of chats."
            missing = {"heading": "No such chat", "text": text, "back": f"{self.base}/chats"}
            return self.render(request, "message.html", missing, status=404)
        store = self.services.runtime.store
        shown = await self.reports.turns(key)
        misses = await self.misses.on_requests(key, [t.request_id for t in shown])
        numbers = {t.request_id: number for number, t in enumerate(shown, start=1)}
        figures = [
            TurnFigures(
                t.request_id,
                f"#{number} {when(t.created_at, self.timezone)} {_purpose(t.purpose)} on {t.model}",
                t.input_tokens, t.cache_read, t.cache_write, t.output_tokens,
            )
            for number, t in enumerate(shown, start=1)
        ]  # fmt: skip
        marks = [
            MissMark(
                m.request_id,
                m.cause,
                _cause(m.cause),
                f"cache miss ({_cause(m.cause)}): {m.missed_tokens:,} tokens not read from the cache, "
                f"{money(m.missed_usd)}; {m.detail}",
            )
            for m in misses
            if m.request_id is not None
        ]
        records = await store.sessions.of_key(key)
        replies = await self.reports.replies(key)
        sessions = [
            {"record": r, "usage": UsageRow(r.id, r.input_tokens, r.cache_read_tokens, r.cache_write_tokens,
                                            r.output_tokens, r.estimated_cost, r.uncached_cost)}
            for r in records
        ]  # fmt: skip
        values: dict[str, Any] = {
            "heading": chat.name or key,
            "chat": chat,
            "turn_chart": turns(figures, marks),
            "turns_shown": len(shown),
            "misses": [(numbers.get(m.request_id or -1), m) for m in misses],
            "miss_totals": await self.misses.of_chat(key),
            "causes": CAUSE_LABELS,
            "purposes": [row_for_purpose(p) for p in await store.usage.by_purpose(key)],
            "sessions": sessions,
            "replies": None if replies is None else [replace(r, text=preview(r.text)) for r in replies],
            "operations": OPERATIONS,
            "pills": PILLS,
            "reply_limit": REPLY_LIMIT,
            "budget": await self.budgets.chat(key),
            "overrides": self.budgets.overrides_of_chat(key),
            "timezone": str(self.timezone),
        }
        return self.render(request, "chat.html", values)

    # --- scheduled jobs --------------------------------------------------------------------------

    async def jobs(self, request: web.Request) -> web.StreamResponse:
        manager = self.services.runtime.cron
        jobs = [_job_view(job) for job in await manager.visible(COMMAND_LINE)]
        values = {"heading": "Scheduled jobs", "jobs": jobs, "timezone": str(self.timezone)}
        return self.render(request, "jobs.html", values)

    async def change_job(self, request: web.Request) -> web.StreamResponse:
        change = request.match_info["change"]
        if change not in CHANGES:
            raise self.web.done(
                f"{self.base}/jobs", Notice("error", f"'{change}' is not something a job can do.")
            )
        manager = self.services.runtime.cron
        try:
            job = await manager.find(COMMAND_LINE, request.match_info["job_id"])
            await change_job(manager, COMMAND_LINE, change, job.id)
        except CronError as error:
            raise self.web.done(f"{self.base}/jobs", Notice("error", str(error))) from None
        done = {"run": "Running now", "pause": "Paused", "resume": "Resumed", "remove": "Removed"}[change]
        raise self.web.done(f"{self.base}/jobs", Notice("ok", f'{done}: "{job.name}" ({job.id}).'))

    # --- pairing ---------------------------------------------------------------------------------

    async def pairing(self, request: web.Request) -> web.StreamResponse:
        pairing = self.services.pairing
        values = {
            "heading": "Pairing",
            "pending": await pairing.pending(),
            "approved": await pairing.approved(),
        }
        return self.render(request, "pairing.html", values)

    async def decide_pairing(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        platform, code = str(form.get("platform", "")), str(form.get("code", ""))
        pairing = self.services.pairing
        if request.match_info["decision"] == "approve":
            user = await pairing.approve(platform, code, CONSOLE_ADMIN)  # queues the welcome too
            if user is not None:
                self.services.sender.notify()
                who = person_id(user.platform, user.user_id)
                text = f"Approved {user.user_name} ({who}); they are being told."
                raise self.web.done(f"{self.base}/pairing", Notice("ok", text))
        else:
            denied = await pairing.deny(platform, code)
            if denied is not None:
                who = person_id(denied.platform, denied.user_id)
                text = f"Denied the request of {denied.user_name} ({who})."
                raise self.web.done(f"{self.base}/pairing", Notice("ok", text))
        text = f"No pending {platform} pairing code {code.upper()}: it expired or was handled already."
        raise self.web.done(f"{self.base}/pairing", Notice("error", text))

    async def revoke(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        platform, user_id = str(form.get("platform", "")), str(form.get("user_id", ""))
        who = person_id(platform, user_id)
        services = self.services
        if await services.pairing.revoke(platform, user_id):
            paused = await pause_lost(services.runtime.cron.jobs, services.authorizer, person=who)
            jobs = f" Paused the jobs they made: {', '.join(p.job.id for p in paused)}." if paused else ""
            raise self.web.done(
                f"{self.base}/pairing", Notice("ok", f"Revoked {who}: they can no longer use the bot.{jobs}")
            )
        raise self.web.done(f"{self.base}/pairing", Notice("error", f"{who} was not approved."))

    # --- budgets and health ----------------------------------------------------------------------

    async def budget_lines(self, request: web.Request) -> web.StreamResponse:
        page = await self.budgets.page(_number(request.query.get("page"), 1))
        owed = await self.budgets.book.owed_warnings()  # warnings no admin could be sent yet
        values = {"heading": "Budgets", "budgets": page, "timezone": str(self.timezone), "owed": owed}
        return self.render(request, "budgets.html", values)

    async def health(self, request: web.Request) -> web.StreamResponse:
        report = await self.readiness()
        runtime = self.services.runtime
        uptime = int(time.time() - self.services.started_at)
        health: dict[str, Any] = {
            "ready": bool(report["ready"]),
            "problems": report["problems"],
            "role": "single process" if self.member is None else self.member.role,
            "instance": f"pid {os.getpid()}" if self.member is None else self.member.instance_id,
            "uptime": f"{uptime // 86400}d {uptime % 86400 // 3600}h {uptime % 3600 // 60}min",
            "queued": self.services.lanes.depth,
            "pending_inbox": await self.services.inbox.pending_count(),
            "pending_outbox": await self.services.outbox.pending_count(),
            "replies": await self.services.outbox.fates_since(time.time() - REPLIES_SECONDS),
            "session_leases": runtime.locks.held,
            "dependencies": await self._dependencies(),
            "cluster": await self._cluster(),
        }
        return self.render(request, "health.html", {"heading": "Health", "health": health})

    async def _dependencies(self) -> list[Dependency]:
        found = []
        for adapter in self.services.adapters.values():
            status = adapter.status()
            detail = status.detail or ("connected" if status.connected else "not connected")
            found.append(Dependency(adapter.platform, status.connected, detail))
        storage = self.services.runtime.storage
        probe = GatewayFacts(storage).recall("ready_probe")  # one row's read
        found.append(await _timed(f"database ({storage.dialect})", storage.description, probe))
        cluster = self.services.runtime.cluster
        if cluster is not None:
            found.append(await _timed("redis", "the cluster's coordination", cluster.redis.ping()))
        return found

    async def _cluster(self) -> Mapping[str, Any] | None:
        member = self.member
        if member is None:
            return None
        # redis-py: cluster mode only
        from gateway.cluster.roster import read_roster

        report = member.report()
        queue = report["queue"]
        assert isinstance(queue, dict)
        values: dict[str, Any] = {
            "leases": member.leases(),
            "session_leases": report["session_leases"],
            "lag": queue["oldest_seconds"],
            "pending": queue["pending"],
            "unread": queue["unread"],
            "running": queue["running"],
            "members": [],
            "leader": None,
            "roster_error": None,
        }
        try:
            async with asyncio.timeout(PROBE_SECONDS):
                roster = await read_roster(member.redis)
        except ANY_REDIS_ERROR as error:
            values["roster_error"] = f"Redis did not say who is in the cluster ({error or 'no answer'})."
            return values
        values["members"], values["leader"] = roster.members, roster.leader
        return values


async def _timed(name: str, where: str, probe: Awaitable[object]) -> Dependency:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(PROBE_SECONDS):
            await probe
    except TimeoutError:
        return Dependency(name, False, f"{where}: no answer within {PROBE_SECONDS:.0f} s")
    except Exception as error:  # any failure is the state to show; say which
        return Dependency(name, False, f"{where}: {type(error).__name__}: {error}")
    return Dependency(name, True, f"{where}: answered in {(time.perf_counter() - started) * 1000:.1f} ms")


def _purpose(purpose: str) -> str:
    return PURPOSE_LABELS.get(purpose, purpose)


def _cause(cause: str) -> str:
    """A cause as ``herald insights`` names it (one it does not know: as stored)."""
    return next((label for known, label in CAUSE_LABELS.items() if known == cause), cause)


def _choice(value: str | None, kind: type[ChatSort], default: ChatSort) -> ChatSort:
    try:
        return kind(value) if value else default
    except ValueError:
        return default


def _number(value: str | None, default: int) -> int:
    return int(value) if value and value.isdigit() and len(value) < 9 else default


@dataclass(frozen=True)
class JobRow:
    """What a job's row shows: its state, its last run's outcome and the buttons it has."""

    id: str
    name: str
    schedule: str
    target_text: str
    prompt_preview: str
    enabled: bool
    state: str
    state_kind: str  # the pill's colour
    next_run_at: float | None
    last_run_at: float | None
    outcome: str
    outcome_kind: str
    detail: str | None
    actions: list[tuple[str, str, str]]  # (change, button label, button style)


def _job_view(job: CronJob) -> JobRow:
    if job.enabled:
        state, state_kind = "active", "ok"
    elif job.repeat == 0:
        state, state_kind = "finished", ""
    else:
        state, state_kind = "paused", "warn"
    outcome, outcome_kind, detail = _outcome(job)
    actions = [("run", "Run now", "primary"), ("pause", "Pause", "")] if job.enabled else []
    if not job.enabled and job.repeat != 0:
        actions.append(("resume", "Resume", ""))
    actions.append(("remove", "Remove", "danger"))
    return JobRow(
        id=job.id,
        name=job.name,
        schedule=job.schedule,
        target_text=chat_text(job.target),
        prompt_preview=preview(job.prompt),
        enabled=job.enabled,
        state=state,
        state_kind=state_kind,
        next_run_at=job.next_run_at,
        last_run_at=job.last_run_at,
        outcome=outcome,
        outcome_kind=outcome_kind,
        detail=detail,
        actions=actions,
    )


def _outcome(job: CronJob) -> tuple[str, str, str | None]:
    """(outcome, its colour, a detail line) of the job's last run."""
    status = job.last_status
    if status is None:
        return "not run yet", "", None
    if status is RunStatus.OK:
        kind = (
            {DeliveryState.SENT: "ok", DeliveryState.FAILED: "bad"}.get(job.delivery, "warn")
            if job.delivery
            else "warn"
        )
        return f"answered, delivery {delivery_text(job)}", kind, preview(job.last_output or "")
    if status is RunStatus.SILENT:
        return "answered [SILENT], nothing sent", "ok", None
    if status is RunStatus.FAILED:
        return "failed", "bad", job.last_error
    if status is RunStatus.MISSED:
        return "missed", "warn", job.last_error
    if status is RunStatus.INTERRUPTED:
        return "interrupted", "warn", job.last_error
    return "running", "", None
