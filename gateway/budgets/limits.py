"""Which scopes a request is charged to, and their limits, from ``budgets:`` (pure).

- A chat's turn (its tool rounds, sub-agents and compressions): the bot, the chat (its session key)
  and the person who wrote (``platform:user_id``); exempt when ``budgets.exempt_admins`` is on and the
  person is an admin.
- A background review: the bot and the chat (it is nobody's message).
- A scheduled job's run: the bot and the job, with the job's per-run limit counted in that run; a job a
  guest made (not an admin), also that guest: their job cannot spend what their messages may not.

Overrides (``budgets.overrides``) are looked up from the most particular key to the least: for a chat,
its session key (``telegram:group:-100123:topic:7``), then ``platform:chat_id:thread_id``, then
``platform:chat_id``; for a person ``platform:user_id``; for a job ``cron:JOB_ID``. A limit the first
matching override gives (an explicit null included) replaces the scope's default.

:func:`listed_limits` states the same decision for every chat, person and job at once, as data (the
console sorts its chat list and its Budgets page by the share of their limits each spent, in SQL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapters.base import ChatAddress
from agent.api import Charge, Limit, Scope, WindowKind
from agent.memory import scope_parts
from gateway.chats import (
    KeyKind,
    chat_of_session_key,
    chat_session_key,
    chat_text,
    job_of_session_key,
    parse_chat,
    parse_session_key,
    topics_prefix,
)
from gateway.config import BudgetSettings, LimitOverride, ScopeLimits

BOT, CHAT, PERSON, CRON = "bot", "chat", "person", "cron"
FIELDS: dict[str, WindowKind] = {"daily_usd": "day", "monthly_usd": "month", "per_run_usd": "run"}


def limits_of(defaults: ScopeLimits, overrides: Sequence[LimitOverride]) -> tuple[Limit, ...]:
    """The limits of a scope: its kind's ``defaults``, each replaced by the first of ``overrides`` that
    gives it."""
    fields = type(defaults).model_fields  # a field its kind lacks (per_run_usd of a chat) is no limit
    values: dict[str, float | None] = {name: getattr(defaults, name) for name in FIELDS if name in fields}
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
            keys.append(chat_text(address))
        keys.append(chat_text(ChatAddress(address.platform, address.chat_id)))
    return keys


@dataclass(frozen=True)
class KeyRule:
    """The chats one override names, as a test of their session keys: one of ``keys``, or a topic of a
    group (``topics_of`` followed by a thread id)."""

    usd: float | None  # the limit it gives them (None: it lifts the limit)
    keys: tuple[str, ...] = ()
    topics_of: str | None = None  # "telegram:group:-100123:topic:"


@dataclass(frozen=True)
class KeyLimits:
    """One limit of many scopes at once: the first of ``rules`` that names a session key gives it, else
    ``default``."""

    default: float | None
    rules: tuple[KeyRule, ...]

    @property
    def any(self) -> bool:
        return self.default is not None or any(rule.usd is not None for rule in self.rules)


@dataclass(frozen=True)
class ListedLimits:
    """The limit of ``window`` for every chat the console lists, by its session key: a scheduled job's runs
    (``cron:JOB_ID``) have their job's (``jobs``), every other chat its chat limit (``chats``). What
    :func:`listed_scope` decides for one of them. A person's, by ``platform:user_id`` (``people``), and
    the bot's (``bot``), as :func:`person_scope` and :func:`bot_scope` decide them."""

    window: WindowKind
    chats: KeyLimits
    jobs: KeyLimits
    people: KeyLimits
    bot: float | None

    @property
    def any(self) -> bool:
        return self.bot is not None or self.chats.any or self.jobs.any or self.people.any


def listed_scope(settings: BudgetSettings, session_key: str) -> Scope:
    """The scope whose limits a chat of the console's list spends against: its job's for a scheduled
    job's runs (a run is charged to the bot and its job), else the chat's."""
    job = job_of_session_key(session_key)
    return chat_scope(settings, session_key) if job is None else job_scope(settings, job)


def listed_limits(settings: BudgetSettings, window: WindowKind) -> ListedLimits:
    """:func:`listed_scope`'s limits of ``window`` as :class:`ListedLimits`; a chat's overrides by the key
    :func:`chat_override_keys` finds first (its session key, then ``platform:chat_id:thread_id``, then
    ``platform:chat_id``), a job's by ``cron:JOB_ID``."""
    name = next(field for field, kind in FIELDS.items() if kind == window)
    by_session, by_topic, by_chat, by_job = [], [], [], []
    for key, override in settings.overrides.items():
        given = override.given()
        if name not in given:
            continue
        usd = given[name]
        if job_of_session_key(key) is not None:
            by_job.append(KeyRule(usd, keys=(key,)))
        by_session.append(KeyRule(usd, keys=(key,)))
        chat = override_chat(key)
        if chat is None:
            continue
        if chat.thread_id:
            by_topic.append(KeyRule(usd, keys=(chat_session_key(chat, direct=False),)))
        else:
            direct, group = chat_session_key(chat, direct=True), chat_session_key(chat, direct=False)
            by_chat.append(
                KeyRule(usd, keys=(direct, group), topics_of=topics_prefix(chat.platform, chat.chat_id))
            )
    return ListedLimits(
        window,
        chats=KeyLimits(getattr(settings.chat, name, None), (*by_session, *by_topic, *by_chat)),
        jobs=KeyLimits(getattr(settings.cron, name, None), tuple(by_job)),
        people=KeyLimits(getattr(settings.person, name, None), tuple(by_session)),  # the key is the person
        bot=getattr(settings.bot, name, None),
    )


def override_chat(key: str) -> ChatAddress | None:
    """The chat an override key names as ``platform:chat[:thread]`` (not a session key, not the terminal's),
    else None."""
    if parse_session_key(key).kind is not KeyKind.OTHER:
        return None
    try:
        chat = parse_chat(key, example="")
    except ValueError:
        return None
    return chat if chat_text(chat) == key else None  # as written: chat_override_keys matches it exactly


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


def review_charge(settings: BudgetSettings, session_key: str, memory_scope: str) -> Charge:
    """A background review of a chat's session: the bot and the chat, and the person whose own memory it
    reviews (a guest's direct chat or API conversation). A group's review is the group's (its memory is
    the chat's), and the owner's is the owner's (admins' own requests are exempt by default)."""
    scopes = (bot_scope(settings), chat_scope(settings, session_key))
    try:
        parts = scope_parts(memory_scope)
    except ValueError:  # not a scope this gateway makes: the bot and the chat
        parts = None
    if parts is None or parts.kind != "user":
        return Charge(scopes)
    return Charge((*scopes, person_scope(settings, f"{parts.platform}:{parts.ident}")))


def run_charge(settings: BudgetSettings, job_id: str, run: str, guest: str | None = None) -> Charge:
    """A scheduled job's run; ``guest``: the person (``platform:user_id``) who made it, when not an admin."""
    scopes = (bot_scope(settings), job_scope(settings, job_id, run))
    return Charge((*scopes, person_scope(settings, guest)) if guest is not None else scopes)


def default_charge(settings: BudgetSettings) -> Charge:
    """What a request made outside any of the above is charged to: the bot."""
    return Charge((bot_scope(settings),))
