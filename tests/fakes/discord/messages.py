"""Messages as Discord validates, stores and shows them (the state lock is held by every caller).

Validation follows the API: content is at most 2000 characters (400 "Invalid Form Body", 50035,
``BASE_TYPE_MAX_LENGTH``), a message with nothing in it is 400 50006, at most 10 embeds with the
documented field limits, a reply to an unknown message fails unless ``fail_if_not_exists`` is
false. Mentions are resolved the way ``allowed_mentions`` asks: without it every ``<@id>`` and
``@everyone`` pings; ``{"parse": []}`` pings nobody. ``enforce_nonce`` returns the earlier message of
the same author in the channel with that nonce instead of creating a duplicate, as Discord does for a
few minutes; a create that was refused leaves no nonce behind.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .records import EPHEMERAL, LOADING, Attachment, StoredMessage
from .sessions import DIRECT_MESSAGES, GUILD_MESSAGES, MESSAGE_CONTENT, Session
from .wire import (
    EMPTY_MESSAGE,
    MISSING_PERMISSIONS,
    ApiError,
    form_error,
    iso,
    too_long,
)
from .world import DM

if TYPE_CHECKING:
    from .state import DiscordState

CONTENT_LIMIT = 2000
EMBED_LIMIT = 10
EMBED_TOTAL = 6000
EMBED_FIELDS = {"title": 256, "description": 4096}
NONCE_WINDOW = 300.0
REPLY = 19
DEFAULT = 0
IS_VOICE_MESSAGE = 1 << 13
VOICE_CONTENT = 50159  # "Voice messages do not support additional content."
VOICE_ATTACHMENT = 50160  # "Voice messages must have a single audio attachment."
VOICE_METADATA = 50161  # "Voice messages must have supporting metadata."
_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_EVERYONE = re.compile(r"@(everyone|here)\b")


@dataclass
class Upload:
    """A file part (``files[n]``) of a multipart request."""

    part: str  # the form field name, files[n]
    filename: str
    content_type: str
    data: bytes = field(repr=False)


# --- validation --------------------------------------------------------------------------------


def validate(payload: dict[str, Any], uploads: list[Upload], *, creating: bool) -> None:
    """Raise :class:`ApiError` where Discord would reject ``payload``."""
    content = payload.get("content")
    if content is not None and not isinstance(content, str):
        raise form_error("content", "STRING_TYPE_CONVERT", "Could not interpret content as string.")
    if isinstance(content, str) and len(content) > CONTENT_LIMIT:
        raise too_long("content", CONTENT_LIMIT)
    embeds = payload.get("embeds") or []
    if not isinstance(embeds, list):
        raise form_error("embeds", "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType")
    if len(embeds) > EMBED_LIMIT:
        raise too_long("embeds", EMBED_LIMIT)
    total = 0
    for index, embed in enumerate(embeds):
        for name, limit in EMBED_FIELDS.items():
            value = str(embed.get(name) or "")
            total += len(value)
            if len(value) > limit:
                raise too_long(f"embeds.{index}.{name}", limit)
        for item in embed.get("fields") or []:
            total += len(str(item.get("name") or "")) + len(str(item.get("value") or ""))
        total += len(str((embed.get("footer") or {}).get("text") or ""))
        total += len(str((embed.get("author") or {}).get("name") or ""))
    if total > EMBED_TOTAL:
        raise form_error("embeds", "MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000")
    mentions = payload.get("allowed_mentions")
    if isinstance(mentions, dict):
        parse = mentions.get("parse") or []
        for kind in ("users", "roles"):
            if kind in parse and mentions.get(kind):
                raise form_error(
                    f"allowed_mentions.{kind}",
                    "ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                    f'parse:["{kind}"] and {kind}: [ids...] are mutually exclusive.',
                )
    if creating and not _has_body(payload, uploads):
        raise ApiError(400, EMPTY_MESSAGE)


def _has_body(payload: dict[str, Any], uploads: list[Upload]) -> bool:
    return bool(
        payload.get("content")
        or payload.get("embeds")
        or uploads
        or payload.get("sticker_ids")
        or payload.get("components")
        or payload.get("poll")
    )


# --- building ----------------------------------------------------------------------------------


def resolve_mentions(
    state: DiscordState,
    content: str,
    allowed: dict[str, Any] | None,
    replied_author: int | None,
) -> tuple[list[int], list[int], bool]:
    """(user ids, role ids, everyone) that ``content`` pings under ``allowed_mentions``."""
    users = [int(u) for u in dict.fromkeys(_USER_MENTION.findall(content)) if int(u) in state.world.users]
    roles = [int(r) for r in dict.fromkeys(_ROLE_MENTION.findall(content))]
    everyone = _EVERYONE.search(content) is not None
    if allowed is not None:
        parse = allowed.get("parse") or []
        allowed_users = {int(u) for u in allowed.get("users") or []}
        allowed_roles = {int(r) for r in allowed.get("roles") or []}
        users = [u for u in users if "users" in parse or u in allowed_users]
        roles = [r for r in roles if "roles" in parse or r in allowed_roles]
        everyone = everyone and "everyone" in parse
        if replied_author is not None and allowed.get("replied_user") and replied_author not in users:
            users.append(replied_author)
    elif replied_author is not None and replied_author not in users:
        users.append(replied_author)
    return users, roles, everyone


def attachment_api(
    state: DiscordState, msg: StoredMessage, attachment_id: int, file: Attachment
) -> dict[str, Any]:
    url = f"{state.base_url}/attachments/{msg.channel_id}/{attachment_id}/{file.filename}"
    out: dict[str, Any] = {
        "id": str(attachment_id),
        "filename": file.filename,
        "size": len(file.data),
        "url": url,
        "proxy_url": url,
    }
    if file.content_type is not None:
        out["content_type"] = file.content_type
    if file.voice:
        out.update(duration_secs=file.duration, waveform=file.waveform, flags=0)
    return out


def message_api(state: DiscordState, msg: StoredMessage, *, with_reference: bool = True) -> dict[str, Any]:
    """The Discord ``Message`` object for a stored message."""
    world = state.world
    out: dict[str, Any] = {
        "id": str(msg.id),
        "channel_id": str(msg.channel_id),
        "type": msg.type,
        "author": world.user_api(msg.author_id),
        "content": msg.content,
        "timestamp": msg.timestamp,
        "edited_timestamp": msg.edited_timestamp,
        "tts": msg.tts,
        "mention_everyone": msg.mention_everyone,
        "mentions": [_mentioned(state, msg, uid) for uid in msg.mentions],
        "mention_roles": [str(r) for r in msg.mention_roles],
        "attachments": [attachment_api(state, msg, aid, a) for aid, a in msg.attachments],
        "embeds": [dict(e, type=e.get("type", "rich")) for e in msg.embeds],
        "components": list(msg.components),
        "pinned": False,
        "flags": msg.flags,
    }
    if msg.guild_id is not None:
        out["guild_id"] = str(msg.guild_id)
        members = world.guilds[msg.guild_id].members
        if msg.webhook_id is None and msg.author_id in members:
            out["member"] = world.member_api(msg.guild_id, msg.author_id, with_user=False)
    if msg.nonce is not None:
        out["nonce"] = msg.nonce
    if msg.webhook_id is not None:
        out["webhook_id"] = str(msg.webhook_id)
        out["application_id"] = str(state.application_id)
    if msg.interaction_id is not None:
        interaction = state.interactions.get(msg.interaction_id)
        if interaction is not None:
            out["interaction_metadata"] = {
                "id": str(interaction.id),
                "type": interaction.type,
                "name": interaction.name,
                "user": world.user_api(interaction.user_id),
                "authorizing_integration_owners": {},
            }
    channel = world.channels.get(msg.channel_id)
    if channel is not None and channel.is_thread:
        out["position"] = channel.message_count
    if msg.message_reference is not None:
        out["message_reference"] = dict(msg.message_reference, type=0)
        if with_reference:
            target = state.messages_by_id.get(int(msg.message_reference["message_id"]))
            out["referenced_message"] = (
                None if target is None or target.deleted else message_api(state, target, with_reference=False)
            )
    return out


def _mentioned(state: DiscordState, msg: StoredMessage, user_id: int) -> dict[str, Any]:
    user = state.world.user_api(user_id)
    if msg.guild_id is not None and user_id in state.world.guilds[msg.guild_id].members:
        user["member"] = state.world.member_api(msg.guild_id, user_id, with_user=False)
    return user


def content_shape(state: DiscordState, msg: StoredMessage) -> Any:
    """Per session: without the message-content intent, guild messages that neither come from the
    bot nor mention it arrive with empty content, embeds, attachments and components."""

    def shape(session: Session, payload: dict[str, Any]) -> dict[str, Any]:
        channel = state.world.channels.get(msg.channel_id)
        private = channel is not None and channel.type == DM
        if session.has(MESSAGE_CONTENT) or private or msg.author_id == state.bot_id:
            return payload
        if state.bot_id in msg.mentions:
            return payload
        payload.update(content="", embeds=[], attachments=[], components=[])
        return payload

    return shape


# --- changing ----------------------------------------------------------------------------------


def create_message(
    state: DiscordState,
    channel_id: int,
    payload: dict[str, Any],
    uploads: list[Upload],
    *,
    author_id: int,
    flags: int = 0,
    msg_type: int | None = None,
    interaction_id: int | None = None,
    webhook_id: int | None = None,
    dispatch: bool = True,
) -> StoredMessage:
    """Validate and store a new message; MESSAGE_CREATE goes out when ``dispatch``."""
    validate(payload, uploads, creating=True)
    channel = state.world.channels[channel_id]
    nonce = payload.get("nonce")
    if payload.get("enforce_nonce") and nonce is not None:
        earlier = state.nonces.get((channel_id, author_id, str(nonce)))
        if earlier is not None and time.monotonic() - earlier[1] < NONCE_WINDOW:
            return state.messages_by_id[earlier[0]]
    reference = _reference(state, channel_id, payload.get("message_reference"))
    replied_author = None
    if reference is not None:
        replied_author = state.messages_by_id[int(reference["message_id"])].author_id
    content = payload.get("content") or ""
    allowed = payload.get("allowed_mentions")
    users, roles, everyone = resolve_mentions(state, content, allowed, replied_author)
    msg = StoredMessage(
        id=state.snowflakes.next(),
        channel_id=channel_id,
        guild_id=channel.guild_id,
        author_id=author_id,
        content=content,
        timestamp=iso(),
        type=msg_type if msg_type is not None else (REPLY if reference is not None else DEFAULT),
        embeds=list(payload.get("embeds") or []),
        components=list(payload.get("components") or []),
        allowed_mentions=allowed,
        message_reference=reference,
        mentions=users,
        mention_roles=roles,
        mention_everyone=everyone,
        flags=int(payload.get("flags") or 0) | flags,
        tts=bool(payload.get("tts")),
        nonce=nonce,
        interaction_id=interaction_id,
        webhook_id=webhook_id,
        versions=[content],
    )
    if msg.flags & IS_VOICE_MESSAGE:
        msg.attachments = [(state.snowflakes.next(), voice_attachment(state, channel_id, payload, uploads))]
    else:
        msg.attachments = [
            (state.snowflakes.next(), Attachment(u.filename, u.content_type, u.data)) for u in uploads
        ]
    store(state, msg)
    if nonce is not None:
        state.nonces[(channel_id, author_id, str(nonce))] = (msg.id, time.monotonic())
    if dispatch:
        dispatch_create(state, msg)
    return msg


def voice_attachment(
    state: DiscordState, channel_id: int, payload: dict[str, Any], uploads: list[Upload]
) -> Attachment:
    """A voice message's one audio file, checked as Discord checks it: no text beside it, a single OGG
    attachment whose entry says its ``duration_secs`` and ``waveform``, and the permission to send one."""
    if channel_id in state.voice_messages_denied:
        raise ApiError(403, MISSING_PERMISSIONS)
    if payload.get("content") or payload.get("embeds"):
        raise ApiError(400, VOICE_CONTENT, "Voice messages do not support additional content.")
    if len(uploads) != 1 or not uploads[0].filename.endswith(".ogg"):
        raise ApiError(400, VOICE_ATTACHMENT, "Voice messages must have a single audio attachment.")
    entries = payload.get("attachments") or [{}]
    entry = entries[0] if isinstance(entries[0], dict) else {}
    duration, waveform = entry.get("duration_secs"), entry.get("waveform")
    if not isinstance(duration, int | float) or not isinstance(waveform, str) or not waveform:
        raise ApiError(400, VOICE_METADATA, "Voice messages must have supporting metadata.")
    upload = uploads[0]
    return Attachment(upload.filename, "audio/ogg", upload.data, voice=True, duration=float(duration),
                      waveform=waveform)  # fmt: skip


def store(state: DiscordState, msg: StoredMessage) -> None:
    state.messages_by_id[msg.id] = msg
    channel = state.world.channels[msg.channel_id]
    channel.last_message_id = msg.id
    if channel.is_thread:
        channel.message_count += 1


def dispatch_create(state: DiscordState, msg: StoredMessage) -> None:
    if msg.author_id == state.bot_id and not state.echo_bot_messages:
        return
    if msg.flags & EPHEMERAL:  # ephemeral messages never reach the gateway
        return
    intent = GUILD_MESSAGES if msg.guild_id is not None else DIRECT_MESSAGES
    state.dispatch("MESSAGE_CREATE", message_api(state, msg), intent, content_shape(state, msg))


def edit_message(
    state: DiscordState, msg: StoredMessage, payload: dict[str, Any], uploads: list[Upload]
) -> StoredMessage:
    """Apply an edit (only the fields present change; nothing changes when it is rejected);
    MESSAGE_UPDATE goes out."""
    validate(payload, uploads, creating=False)
    content = (payload.get("content") or "") if "content" in payload else msg.content
    embeds = list(payload.get("embeds") or []) if "embeds" in payload else msg.embeds
    components = list(payload.get("components") or []) if "components" in payload else msg.components
    attachments = msg.attachments
    if "attachments" in payload:
        keep = {str(a.get("id")) for a in payload.get("attachments") or [] if isinstance(a, dict)}
        attachments = [(aid, a) for aid, a in msg.attachments if str(aid) in keep]
    if uploads:
        attachments = attachments + [
            (state.snowflakes.next(), Attachment(u.filename, u.content_type, u.data)) for u in uploads
        ]
    if not (content or embeds or attachments or components):
        raise ApiError(400, EMPTY_MESSAGE)
    msg.content, msg.embeds, msg.components, msg.attachments = content, embeds, components, attachments
    if payload.get("flags") is not None:
        msg.flags = int(payload["flags"]) | (msg.flags & EPHEMERAL)
    if "allowed_mentions" in payload or "content" in payload:
        allowed = payload.get("allowed_mentions", msg.allowed_mentions)
        msg.mentions, msg.mention_roles, msg.mention_everyone = resolve_mentions(
            state, msg.content, allowed, None
        )
    if msg.flags & LOADING:
        msg.flags &= ~LOADING  # a deferred response gets its content: not shown as edited
    else:
        msg.edited_timestamp = iso()
    msg.versions.append(msg.content)
    if not msg.flags & EPHEMERAL:
        intent = GUILD_MESSAGES if msg.guild_id is not None else DIRECT_MESSAGES
        state.dispatch("MESSAGE_UPDATE", message_api(state, msg), intent, content_shape(state, msg))
    return msg


def delete_message(state: DiscordState, msg: StoredMessage) -> None:
    msg.deleted = True
    state.record_deleted(msg.id)
    if msg.flags & EPHEMERAL:
        return
    data: dict[str, Any] = {"id": str(msg.id), "channel_id": str(msg.channel_id)}
    if msg.guild_id is not None:
        data["guild_id"] = str(msg.guild_id)
    state.dispatch("MESSAGE_DELETE", data, GUILD_MESSAGES if msg.guild_id is not None else DIRECT_MESSAGES)


def _reference(state: DiscordState, channel_id: int, raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict) or raw.get("message_id") is None:
        return None
    target = state.messages_by_id.get(int(raw["message_id"]))
    if target is None or target.deleted or target.channel_id != channel_id:
        if raw.get("fail_if_not_exists", True) is False:
            return None
        raise form_error("message_reference", "REPLIES_UNKNOWN_MESSAGE", "Unknown message")
    out: dict[str, Any] = {"message_id": str(target.id), "channel_id": str(channel_id)}
    if target.guild_id is not None:
        out["guild_id"] = str(target.guild_id)
    return out
