"""Pure rules that map an inbound message to its session, memory and prompt text.

- Session key: a direct chat is one session per platform and chat, a group one per chat shared by its
  members; a thread (a forum topic, a mail thread) is a session of its own in either. The terminal is
  one conversation, ``cli:dm:local``, whichever process the lines come from; a scheduled job's runs
  have ``cron:<job id>``.
- Memory scope: the owner (the terminal, ``gateway.admins`` in their direct chats) keeps the files under
  ``memories/``; every other person has their own; a group has the group's (docs/ARCHITECTURE.md,
  reliability invariant 5).
- Speaker: in a group the speaker's display name is prefixed to the *user message*, never put in the
  system prompt, so every chat of the bot still shares the cached prompt prefix (cache invariant 2).
"""

from __future__ import annotations

from adapters import console
from adapters.base import ChatAddress, ChatType, InboundMessage
from agent.api import SessionSpec
from agent.memory import OWNER_SCOPE, chat_scope, user_scope

MAX_NAME_CHARS = 64
TERMINAL_SESSION_KEY = f"{console.PLATFORM}:dm:{console.CHAT}"


def session_key(message: InboundMessage) -> str:
    if message.platform == console.PLATFORM:  # one conversation, whichever terminal process typed it
        return TERMINAL_SESSION_KEY
    kind = "dm" if message.chat_type is ChatType.DIRECT else "group"
    key = f"{message.platform}:{kind}:{message.chat_id}"
    return f"{key}:topic:{message.thread_id}" if message.thread_id else key


def chat_of_session_key(key: str) -> ChatAddress | None:
    """The chat a session key belongs to (the inverse of ``session_key``); None for keys of no chat
    (the terminal's ``cli:dm:local``, a scheduled job's ``cron:ID``)."""
    parts = key.split(":")
    if parts[0] == console.PLATFORM:  # the terminal cannot receive what is posted later
        return None
    if len(parts) == 3 and parts[1] in ("dm", "group"):
        return ChatAddress(parts[0], parts[2])
    if len(parts) == 5 and parts[1] in ("dm", "group") and parts[3] == "topic":
        return ChatAddress(parts[0], parts[2], parts[4])
    return None


def admin_id(platform: str, user_id: str) -> str:
    """How ``gateway.admins`` names a person: ``platform:user_id``."""
    return f"{platform}:{user_id}"


def memory_scope(message: InboundMessage, *, is_admin: bool) -> str:
    if message.chat_type is not ChatType.DIRECT:
        return chat_scope(message.platform, message.chat_id)
    return person_scope(message.platform, message.user_id, is_admin=is_admin)


def person_scope(platform: str, user_id: str, *, is_admin: bool) -> str:
    """The memory of a person's own conversations (a direct chat, the API): the owner's for an admin,
    else their own."""
    return OWNER_SCOPE if is_admin else user_scope(platform, user_id)


def display_name(name: str) -> str:
    """A speaker name safe to put in front of a message: one line, no brackets games, bounded."""
    clean = " ".join(name.replace("\u0000", "").split())[:MAX_NAME_CHARS]
    return clean or "someone"


def user_text(message: InboundMessage, text: str | None = None) -> str:
    """What the model reads as the user's message (``text``: the message as
    ``gateway.conversation.media`` prepared it, files included; default its plain text): in groups, who
    said it."""
    text = message.text if text is None else text
    if message.chat_type is ChatType.DIRECT:
        return text
    return f"{display_name(message.user_name)}: {text}"


def chat_context(message: InboundMessage) -> str:
    """Per-chat facts for the volatile prompt layer of a new session."""
    if message.chat_type is ChatType.DIRECT:
        return ""
    title = display_name(message.chat_title or "") if message.chat_title else "a group chat"
    return (
        f'This is the group chat "{title}" with several people. Each user message starts with the '
        "speaker's name and a colon. Answer the person who addressed you."
    )


def session_spec(message: InboundMessage, *, is_admin: bool, platform_hint: str = "") -> SessionSpec:
    """``platform_hint``: the platform's adapter's ``prompt_hint``."""
    return SessionSpec(
        session_key=session_key(message),
        source=message.platform,
        platform=message.platform,
        memory_scope=memory_scope(message, is_admin=is_admin),
        chat_id=message.chat_id,
        user_id=message.user_id if message.chat_type is ChatType.DIRECT else None,
        chat_context=chat_context(message),
        platform_hint=platform_hint,
    )


def reply_address(message: InboundMessage) -> ChatAddress:
    return ChatAddress(message.platform, message.chat_id, message.thread_id)
