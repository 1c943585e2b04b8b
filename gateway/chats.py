"""The chat vocabulary every floor of the gateway speaks: session keys, reply addresses, person ids.

The ground floor: it imports nothing of the gateway, so budgets, cron, the API and the console can read
a key without importing the conversation that writes it. This module is the one home of the key
grammar; every other module builds and reads keys through it.

- A chat's session: a direct chat is one session per platform and chat (``telegram:dm:42``); a group
  is one session per chat (``telegram:group:-100``), per topic in forums
  (``telegram:group:-100:topic:7``), shared by its members.
- The terminal: one conversation, ``cli:dm:local``, whichever process the lines come from. It has no
  chat to post into later (``KeyKind.TERMINAL``: a kind of key, not a platform's name compared).
- A scheduled job's runs: ``cron:<job id>``; an API conversation: ``api:conversation:<id>``.
- A chat as a person writes it (a cron job's target, a budget override): ``platform:chat[:thread]``.
- A person: ``platform:user_id`` (how ``gateway.admins`` names them).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from enum import StrEnum

from adapters import terminal
from adapters.base import ChatAddress, ChatType, InboundMessage

SEPARATOR = ":"
DIRECT, GROUP, TOPIC = "dm", "group", "topic"
CRON = "cron"  # a scheduled job's runs
API, API_CONVERSATION = "api", "conversation"  # the OpenAI-compatible API's conversations (and its people)
TERMINAL_SESSION_KEY = f"{terminal.PLATFORM}:dm:{terminal.CHAT}"


class KeyKind(StrEnum):
    CHAT = "chat"  # a platform's chat (or one topic of it): replies can be posted there later
    TERMINAL = "terminal"
    CRON = "cron"
    API = "api"
    OTHER = "other"  # a key of no grammar above (an old release's, a test's)


@dataclass(frozen=True)
class SessionKey:
    """A session key read back: what kind of conversation it names, and its chat, job or API id."""

    kind: KeyKind
    chat: ChatAddress | None = None  # KeyKind.CHAT only
    ident: str = ""  # the job id (CRON), the conversation id (API)


def chat_session_key(address: ChatAddress, *, direct: bool) -> str:
    """The session of a platform's chat: a direct chat's, a group's, or one thread of either (a forum
    topic, a mail thread: a session of its own)."""
    key = f"{address.platform}:{'dm' if direct else 'group'}:{address.chat_id}"
    return f"{key}:topic:{address.thread_id}" if address.thread_id else key


def direct_chats_prefix(platform: str) -> str:
    """What every direct chat's key of ``platform`` starts with (``telegram:dm:``)."""
    return f"{platform}:dm:"


def topics_prefix(platform: str, chat_id: str) -> str:
    """What every topic key of a group starts with (``telegram:group:-100:topic:``)."""
    return f"{platform}:group:{chat_id}:topic:"


def is_terminal(message: InboundMessage) -> bool:
    """A line typed in the terminal (one conversation, the owner's; no chat to post into later)."""
    return message.platform == terminal.PLATFORM


def session_key(message: InboundMessage) -> str:
    if is_terminal(message):  # one conversation, whichever terminal process typed it
        return TERMINAL_SESSION_KEY
    return chat_session_key(reply_address(message), direct=message.chat_type is ChatType.DIRECT)


def job_session_key(job_id: str) -> str:
    """The session key of a job's runs (its own conversation, and its lock)."""
    return f"cron:{job_id}"


JOB_KEYS = job_session_key("")  # what every job's session key starts with (for a query in SQL)


def new_api_session_key() -> str:
    """A new API conversation's key (a client's history that matches no earlier one)."""
    return f"api:conversation:{secrets.token_hex(12)}"


def parse_session_key(key: str) -> SessionKey:
    """The one reader of the grammar above (the inverse of the writers)."""
    parts = key.split(SEPARATOR)
    if key == TERMINAL_SESSION_KEY or parts[0] == terminal.PLATFORM:
        return SessionKey(KeyKind.TERMINAL)
    if parts[0] == CRON and len(parts) == 2 and parts[1]:
        return SessionKey(KeyKind.CRON, ident=parts[1])
    if parts[:2] == [API, API_CONVERSATION] and len(parts) == 3 and parts[2]:
        return SessionKey(KeyKind.API, ident=parts[2])
    if len(parts) == 3 and parts[1] in (DIRECT, GROUP):
        return SessionKey(KeyKind.CHAT, ChatAddress(parts[0], parts[2]))
    if len(parts) == 5 and parts[1] in (DIRECT, GROUP) and parts[3] == TOPIC:
        return SessionKey(KeyKind.CHAT, ChatAddress(parts[0], parts[2], parts[4]))
    return SessionKey(KeyKind.OTHER)


def chat_of_session_key(key: str) -> ChatAddress | None:
    """The chat a session key belongs to; None for keys of no chat (the terminal, a job, the API)."""
    return parse_session_key(key).chat


def job_of_session_key(key: str) -> str | None:
    """The job whose runs ``key`` names, or None."""
    parsed = parse_session_key(key)
    return parsed.ident if parsed.kind is KeyKind.CRON else None


def reply_address(message: InboundMessage) -> ChatAddress:
    return ChatAddress(message.platform, message.chat_id, message.thread_id)


def parse_chat(text: str, *, example: str) -> ChatAddress:
    """``platform:chat[:thread]`` (``telegram:-1001234:7``), as a person writes a chat; raises ValueError
    with the expected form (``example``: a platform's name to show)."""
    platform, _, rest = text.strip().partition(SEPARATOR)
    chat_id, _, thread_id = rest.partition(SEPARATOR)
    if not platform.isalpha() or not chat_id or SEPARATOR in thread_id or " " in rest:
        forms = "platform:chat_id or platform:chat_id:thread_id"
        raise ValueError(f"'{text}' is not a chat: write {forms} (e.g. {example}:12345)")
    return ChatAddress(platform.lower(), chat_id, thread_id or None)


def chat_text(address: ChatAddress) -> str:
    """A chat as :func:`parse_chat` reads it."""
    base = SEPARATOR.join((address.platform, address.chat_id))
    return SEPARATOR.join((base, address.thread_id)) if address.thread_id else base


def person_id(platform: str, user_id: str) -> str:
    """How ``gateway.admins`` (and spend limits) name a person: ``platform:user_id``."""
    return SEPARATOR.join((platform, user_id))


def is_person_id(text: str) -> bool:
    """``platform:user_id`` with a platform's name (letters) and a user id."""
    platform, user_id = split_person_id(text)
    return platform.isalpha() and bool(user_id)


def split_person_id(person: str) -> tuple[str, str]:
    """``telegram:42`` → ("telegram", "42")."""
    platform, _, user_id = person.partition(SEPARATOR)
    return platform, user_id
