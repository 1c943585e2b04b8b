"""Slash commands: one table for every platform (Telegram's menu, Discord's slash commands, the terminal).

A command is recognised by its first word (``/name`` with letters, digits and underscores); anything
else that starts with "/" ("/etc/hosts is broken") is an ordinary message for the model. An unknown
command gets a one-line hint and never reaches the model. Commands that change the conversation
(``/new``, ``/reset``, ``/compress``) run in the chat's lane, after its current turn, holding the
session's lock; the others answer at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from adapters.base import ChatType, CommandSpec
from agent.api import (
    Charge,
    CompressionOutcome,
    ModelInfo,
    SessionStore,
    StartedSession,
    frozen_memory,
)
from agent.db import FencedOut, StorageUnavailable
from gateway import insights
from gateway.access.auth import Authorizer, speaker_of
from gateway.access.pairing import Pairing
from gateway.approvals.answers import Decider, answer_held
from gateway.approvals.service import Approvals
from gateway.budgets.limits import bot_scope
from gateway.budgets.lines import chat_report
from gateway.budgets.service import Budgets
from gateway.chats import chat_of_session_key, person_id, reply_address
from gateway.console.links import LINK_SECONDS, LoginLinks
from gateway.conversation.addressing import memory_scope
from gateway.conversation.chat_settings import ChatSettings, ModelChoice
from gateway.cron.chat import cron_command
from gateway.cron.manage import Caller, CronManager
from gateway.delivery.replies import Replies
from gateway.intake.work import WorkQueue
from gateway.ledger.inbox import InboxRow, NoLongerPending

NOTHING_TO_COMPRESS = "Nothing to compress: the conversation is as short as it gets."
COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:\s+(.*))?$", re.DOTALL)
MODEL_NAME = re.compile(r"^(?:(anthropic|openai):)?([A-Za-z0-9][A-Za-z0-9._/:-]{0,99})$")


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandDesk:
    """What commands may use of the gateway, and nothing more: built once per command from the
    gateway's services by the wiring (``gateway.wiring.handlers.desk_of``), so a command cannot reach for
    the rest of the house."""

    store: SessionStore  # the chat's sessions, usage and cache misses
    new_session: Callable[[InboxRow], Awaitable[StartedSession]]  # /new, /reset: under the chat's lease
    compress: Callable[[InboxRow, Charge], Awaitable[CompressionOutcome | str | None]]  # /compress
    lanes: WorkQueue  # /stop and whether the chat is busy
    budgets: Budgets
    cron: CronManager
    chat_settings: ChatSettings
    default_model: ModelChoice  # what new sessions use unless the chat chose another
    model_info: Callable[[str], ModelInfo]
    pairing: Pairing
    wake_sender: Callable[[], None]  # an approval queued its welcome: send it now
    console_url: Callable[[], str | None]  # None until the console is served
    login_links: LoginLinks
    started_at: float
    approvals: Approvals  # /approve and /deny of held commands
    stop_background: Callable[[str], Awaitable[int]]  # /stop: the chat's background commands, how many


@dataclass(frozen=True)
class CommandContext:
    desk: CommandDesk
    row: InboxRow
    args: str
    is_admin: bool  # decided once, when the command arrived

    @property
    def key(self) -> str:
        return self.row.session_key


Handler = Callable[[CommandContext], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    handler: Handler
    admin_only: bool = False
    in_lane: bool = False  # ordered with the chat's turns and holding the session's lock
    private: bool = False  # only the asker needs to see the reply (Discord answers it ephemerally)


def parse_command(text: str) -> tuple[str, str] | None:
    """``("name", "args")`` when ``text`` is a command, else None (it is a message for the model)."""
    match = COMMAND.match(text.strip())
    if match is None:
        return None
    return match.group(1).lower(), (match.group(2) or "").strip()


async def _help(context: CommandContext) -> str:
    lines = [
        f"/{command.name} — {command.description}"
        for command in COMMANDS
        if context.is_admin or not command.admin_only
    ]
    return "Commands:\n" + "\n".join(lines)


async def _new(context: CommandContext) -> str:
    started = await _fresh_session(context)
    return _with_warnings(
        f"New session started on {started.record.model}. Memory edits and settings apply from here.", started
    )


async def _reset(context: CommandContext) -> str:
    started = await _fresh_session(context)
    text = (
        f"Conversation reset: I start fresh on {started.record.model}. Earlier messages are kept and "
        "session_search still finds them."
    )
    return _with_warnings(text, started)


async def _fresh_session(context: CommandContext) -> StartedSession:
    return await context.desk.new_session(context.row)


def _with_warnings(text: str, started: StartedSession) -> str:
    return "\n".join([text, *(f"Warning: {warning}" for warning in started.warnings)])


async def _stop(context: CommandContext) -> str:
    background = await context.desk.stop_background(context.key)  # this process's (gateway.wiring.runtime)
    also = f" Stopped {background} background command(s) too." if background else ""
    try:
        stopped = await context.desk.lanes.cancel_running(context.key)
    except StorageUnavailable as error:
        log.warning("/stop in %s could not reach the cluster: %s", context.key, error)
        return (
            "I can't reach the other gateway processes right now, so nothing was stopped; "
            f"send /stop again in a moment.{also}"
        )
    if stopped:
        return f"Stopped.{also}"
    return also.strip() or "Nothing is running."


async def _compress(context: CommandContext) -> str:
    budgets = context.desk.budgets
    charge = budgets.for_turn(context.row.message, context.key, is_admin=context.is_admin)
    outcome = await context.desk.compress(context.row, charge)
    if isinstance(outcome, str):
        return f"Not compressed: {outcome}"
    if outcome is not None and outcome.refused is not None:
        return f"Not compressed: {budgets.line(outcome.refused)}"
    if outcome is None:
        return NOTHING_TO_COMPRESS
    return outcome.notice or outcome.line()


async def _insights(context: CommandContext) -> str:
    return await insights.report(context.desk.store, context.key, shown=5, markdown=True)


async def _budget(context: CommandContext) -> str:
    budgets = context.desk.budgets
    message = context.row.message
    with_bot = context.is_admin or bool(bot_scope(budgets.settings).limits)
    person = person_id(message.platform, message.user_id)
    rows = await budgets.book.chat_standing(context.key, person, with_bot=with_bot)
    exempt = context.is_admin and budgets.settings.exempt_admins
    return chat_report(rows, budgets.book.zone, exempt=exempt, now=time.time())


async def _cron(context: CommandContext) -> str:
    message = context.row.message
    admin = context.is_admin
    scope = memory_scope(message, is_admin=admin)
    chat = chat_of_session_key(context.key)  # None in the terminal
    caller = Caller(context.key, scope, chat, creator=speaker_of(message), admin=admin)
    return await cron_command(context.desk.cron, caller, context.args)


async def _model(context: CommandContext) -> str:
    desk = context.desk
    current = await desk.store.sessions.latest(context.key)
    chosen = await desk.chat_settings.model_for(context.key)
    upcoming = chosen or desk.default_model
    if not context.args:
        running = f"This chat's session runs on {current.provider}/{current.model}. " if current else ""
        return f"{running}New sessions use {upcoming.provider}/{upcoming.model}. Change with /model NAME."
    match = MODEL_NAME.match(context.args)
    if match is None:
        return (
            f"'{context.args}' is not a model name. Example: /model claude-haiku-4-5 or /model openai:gpt-5"
        )
    choice = ModelChoice(match.group(1) or upcoming.provider, match.group(2))
    await desk.chat_settings.set_model(context.key, choice)
    keep = f" The current session stays on {current.model} so its cache stays valid." if current else ""
    return (
        f"This chat uses {choice.provider}/{choice.model} from its next session: send /new to start one."
        f"{keep}"
    )


async def _memory(context: CommandContext) -> str:
    session = await context.desk.store.sessions.latest(context.key)
    if session is None:
        return "No conversation yet, so no memory snapshot."
    snapshot = frozen_memory(session.system_prompt)
    if not snapshot:
        return "This session's memory snapshot is empty."
    return f"Memory as this session saw it when it started (edits apply from the next session):\n\n{snapshot}"


async def _status(context: CommandContext) -> str:
    desk = context.desk
    session = await desk.store.sessions.latest(context.key)
    try:
        state = "answering now" if await desk.lanes.busy(context.key) else "idle"
    except StorageUnavailable:
        state = "in an unknown state (the other gateway processes can't be reached)"
    uptime = int(time.time() - desk.started_at)
    lines = [f"Up {uptime // 3600}h {uptime % 3600 // 60}m; this chat is {state}."]
    if session is None:
        lines.append("No session yet.")
    else:
        window = desk.model_info(session.model).context_length
        used = session.last_prompt_tokens or 0
        lines.append(
            f"Session {session.id} on {session.provider}/{session.model}: {session.message_count} messages, "
            f"last prompt {used:,} of {window:,} tokens ({used / window:.0%})."
        )
    return "\n".join(lines)


def _decider(context: CommandContext) -> Decider:
    message = context.row.message
    return Decider(message.platform, message.chat_id, person_id(message.platform, message.user_id),
                   message.user_name)  # fmt: skip


async def _approve(context: CommandContext) -> str:
    held = await answer_held(context.desk.approvals, _decider(context), context.args, approve=True)
    if held is not None:
        return held
    words = context.args.split()
    platform, code = (words[0], words[1]) if len(words) > 1 else (context.row.message.platform, words[0])
    message = context.row.message
    user = await context.desk.pairing.approve(platform, code, person_id(message.platform, message.user_id))
    if user is None:
        return f"No pending {platform} pairing code {code.upper()} (codes expire after an hour)."
    context.desk.wake_sender()  # the welcome was queued with the approval
    return f"Approved {user.user_name} ({user.platform}:{user.user_id}); they will be told."


async def _deny(context: CommandContext) -> str:
    held = await answer_held(context.desk.approvals, _decider(context), context.args, approve=False)
    if held is not None:
        return held
    words = context.args.split()
    platform, code = (words[0], words[1]) if len(words) > 1 else (context.row.message.platform, words[0])
    person = await context.desk.pairing.deny(platform, code)
    if person is None:
        return f"No pending {platform} pairing code {code.upper()} (codes expire after an hour)."
    return f"Denied the access request of {person.user_name} ({person.platform}:{person.user_id})."


async def _pairing(context: CommandContext) -> str:
    pairing = context.desk.pairing
    pending = await pairing.pending()
    approved = await pairing.approved()
    lines = ["Pending codes:"] + [f"  {p.code} {p.platform}:{p.user_id} {p.user_name}" for p in pending]
    if not pending:
        lines.append("  (none)")
    lines.append("Approved:")
    lines += [f"  {a.platform}:{a.user_id} {a.user_name}" for a in approved] or ["  (none)"]
    return "\n".join(lines)


async def _console(context: CommandContext) -> str:
    console_url = context.desk.console_url()
    message = context.row.message
    if console_url is None:
        return (
            "The console is not served here: it needs `herald gateway run` with console.enabled, and "
            "HERALD_CONSOLE_TOKEN set when gateway.http_host is not loopback."
        )
    if message.chat_type is not ChatType.DIRECT:
        return "Ask me for /console in a direct chat: a login link must not be shown to a group."
    secret = await context.desk.login_links.issue(person_id(message.platform, message.user_id))
    minutes = LINK_SECONDS / 60
    return (
        f"Your console login link (it works once, within {minutes:.0f} minutes):\n"
        f"{console_url}/login?link={secret}"
    )


COMMANDS: tuple[Command, ...] = (
    Command("new", "start a new session (a fresh prompt: memory edits show up)", _new, in_lane=True),
    Command("reset", "forget the conversation and start over", _reset, in_lane=True),
    Command("stop", "stop the answer being written and this chat's background commands", _stop),
    Command("compress", "compress the conversation now", _compress, in_lane=True),
    Command("insights", "tokens, cache use and cost of this chat", _insights, private=True),
    Command("budget", "what this chat and you spent today and this month, and limits", _budget, private=True),
    Command("cron", "scheduled jobs of this chat: list, add, pause, resume, run, remove", _cron),
    Command("model", "show or choose the model for the next session", _model),
    Command("memory", "show the memory this session started with", _memory, private=True),
    Command("status", "session, model and context use", _status, private=True),
    Command("help", "this list", _help, private=True),
    Command(
        "approve", "approve the command waiting here, or a pairing code (admins)", _approve, admin_only=True,
        private=True,
    ),
    Command(
        "deny", "deny the command waiting here, or a pairing code (admins)", _deny, admin_only=True,
        private=True,
    ),
    Command(
        "pairing", "list pairing codes and approved people (admins)", _pairing, admin_only=True, private=True
    ),
    Command(
        "console", "a one-time login link for the operator console (admins)", _console, admin_only=True,
        private=True,
    ),
)
BY_NAME = {command.name: command for command in COMMANDS}


def command_in_lane(text: str) -> bool | None:
    """None: ``text`` is no slash command; else whether the command runs in the chat's lane (an unknown
    one is answered at once: with a hint)."""
    parsed = parse_command(text)
    if parsed is None:
        return None
    command = BY_NAME.get(parsed[0])
    return command is not None and command.in_lane


def private_commands() -> frozenset[str]:
    """Commands whose replies only the asker needs to see."""
    return frozenset(command.name for command in COMMANDS if command.private)


def menu() -> list[CommandSpec]:
    """The commands a platform menu shows (everyone's; admins know theirs from /help)."""
    return [CommandSpec(c.name, c.description) for c in COMMANDS if not c.admin_only]


def menu_hash(commands: list[CommandSpec]) -> str:
    """Identifies a menu, so it is published only when it changed (not at every start)."""
    data = json.dumps([[c.name, c.description] for c in commands], separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


async def run_command(context: CommandContext, name: str) -> str:
    """The reply to ``/name`` (unknown and forbidden commands get a one-line hint)."""
    command = BY_NAME.get(name)
    if command is None:
        return f"Unknown command /{name}. Type /help for the list."
    if command.admin_only and not context.is_admin:
        return f"Only an admin can use /{name}."
    return await command.handler(context)


class CommandServices(Protocol):
    """What answering a command reads of the gateway besides the desk (``gateway.wiring`` hands it in):
    whether the asker is an admin, the spend warnings owed to them, the reply road."""

    @property
    def authorizer(self) -> Authorizer: ...
    @property
    def budgets(self) -> Budgets: ...
    @property
    def replies(self) -> Replies: ...


async def answer_command(services: CommandServices, desk: CommandDesk, row: InboxRow) -> None:
    """Run the slash command ``row`` holds on ``desk`` and answer it (every part replying to the message,
    so a Discord slash command keeps its parts together); a failing command gets one line, never
    silence."""
    parsed = parse_command(row.message.text)
    name, args = parsed if parsed is not None else ("", "")
    try:
        message = row.message
        is_admin = services.authorizer.is_admin(message.platform, message.user_id)
        if is_admin:  # spend warnings that could not reach them as a direct message (a command is a message)
            for warning in await services.budgets.owed_warnings(person_id(message.platform, message.user_id)):
                await services.replies.post(reply_address(message), warning)
        reply = await run_command(CommandContext(desk, row, args, is_admin), name)
    except (StorageUnavailable, FencedOut, NoLongerPending):
        raise  # the database is down (run again later), the session or the row is another process's
    except Exception:
        log.exception("command /%s failed", name)
        reply = f"/{name} failed unexpectedly; the details are in the gateway's log."
    await services.replies.answer(row, reply, every_part_replies=True)
