"""Which scopes a request is charged to, and their limits, from ``budgets:`` (pure).

- A chat's turn (its tool rounds, sub-agents and compressions): the bot, the chat (its session key)
  and the person who wrote (``platform:user_id``); exempt when ``budgets.exempt_admins`` is on and the
  person is an admin.
- A background review: the bot and the chat (it is nobody's message).
- A scheduled job's run: the bot and the job, with the job's per-run limit counted in that run.

Overrides (``budgets.overrides``) are looked up from the most particular key to the least: for a chat,
its session key (``telegram:group:-100123:topic:7``), then ``platform:chat_id:thread_id``, then
``platform:chat_id``; for a person ``platform:user_id``; for a job ``cron:JOB_ID``. A limit the first
matching override gives (an explicit null included) replaces the scope's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.api import Charge, Limit, Scope, WindowKind
from gateway.config import BudgetSettings, LimitOverride, ScopeLimits
from gateway.conversation.addressing import chat_of_session_key

BOT, CHAT, PERSON, CRON = "bot", "chat", "person", "cron"
FIELDS: dict[str, WindowKind] = {"daily_usd": "day", "monthly_usd": "month", "per_run_usd": "run"}


def limits_of(defaults: ScopeLimits, overrides: Sequence[LimitOverride]) -> tuple[Limit, ...]:
    """The limits of a scope: its kind's ``defaults``, each replaced by the first of ``overrides`` that
    gives it."""
    values: dict[str, float | None] = {name: getattr(defaults, name, None) for name in FIELDS}
    for name in FIELDS:
        for override in overrides:
            given = override.given()
            if name in given:
                values[name] = given[name]
                break
    return tuple(Limit(FIELDS[name], usd) for name, usd in values.items() if usd is not None)


def chat_override_keys(session_key: str) -> list[str]:
    """The override keys that name the chat of ``session_key``, most particular first."""
    keys = [session_key]
    address = chat_of_session_key(session_key)
    if address is not None:
        if address.thread_id:
            keys.append(f"{address.platform}:{address.chat_id}:{address.thread_id}")
        keys.append(f"{address.platform}:{address.chat_id}")
    return keys


def _matching(overrides: Mapping[str, LimitOverride], keys: Sequence[str]) -> list[LimitOverride]:
    return [overrides[key] for key in keys if key in overrides]


def bot_scope(settings: BudgetSettings) -> Scope:
    return Scope(BOT, "", limits_of(settings.bot, ()))


def chat_scope(settings: BudgetSettings, session_key: str) -> Scope:
    overrides = _matching(settings.overrides, chat_override_keys(session_key))
    return Scope(CHAT, session_key, limits_of(settings.chat, overrides))


def person_scope(settings: BudgetSettings, person: str) -> Scope:
    """``person``: ``platform:user_id``."""
    return Scope(PERSON, person, limits_of(settings.person, _matching(settings.overrides, [person])))


def job_scope(settings: BudgetSettings, job_id: str, run: str | None = None) -> Scope:
    overrides = _matching(settings.overrides, [f"{CRON}:{job_id}"])
    return Scope(CRON, job_id, limits_of(settings.cron, overrides), run=run)


def turn_charge(settings: BudgetSettings, session_key: str, person: str, *, is_admin: bool) -> Charge:
    """A chat's turn (or a command that calls the model) asked for by ``person``."""
    scopes = (bot_scope(settings), chat_scope(settings, session_key), person_scope(settings, person))
    return Charge(scopes, exempt=is_admin and settings.exempt_admins)


def review_charge(settings: BudgetSettings, session_key: str) -> Charge:
    return Charge((bot_scope(settings), chat_scope(settings, session_key)))


def run_charge(settings: BudgetSettings, job_id: str, run: str) -> Charge:
    return Charge((bot_scope(settings), job_scope(settings, job_id, run)))


def default_charge(settings: BudgetSettings) -> Charge:
    """What a request made outside any of the above is charged to: the bot."""
    return Charge((bot_scope(settings),))
