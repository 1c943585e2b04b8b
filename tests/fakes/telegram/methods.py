"""Bot API methods: each handler validates like Telegram and changes state (lock held by the caller).

Handlers take the state, the decoded parameters and the uploaded files; they return the ``result``
(or a :class:`Reply` with a description) or raise :class:`ApiError`. ``getUpdates`` waits, so the
server runs it itself; only its parameter parsing lives here. Method names are case-insensitive,
as on Telegram.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from .formatting import cant_parse, check_entities, check_markdown_v2, parse_html
from .records import ChatAction, StoredFile, StoredMessage
from .state import TelegramState, scope_key
from .wire import ApiError, Reply, Upload, bad_request, utf16_len

Params = dict[str, Any]
Uploads = dict[str, Upload]
Handler = Callable[[TelegramState, Params, Uploads], Any]

MESSAGE_LIMIT = 4096
CAPTION_LIMIT = 1024
CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
_COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the same "
    "as a current content and reply markup of the message"
)


# --- parameter helpers ---------------------------------------------------------------------------


def _int(params: Params, name: str, missing: str) -> int:
    value = params.get(name)
    if value is None or value == "":
        raise bad_request(missing)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"invalid {name} specified")
    return value


def _optional_int(params: Params, name: str) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"invalid {name} specified")
    return value


def _chat(state: TelegramState, params: Params) -> int:
    raw = params.get("chat_id")
    if raw is None or raw == "":
        raise bad_request("chat_id is empty")
    if isinstance(raw, str):
        chat_id = next((cid for cid, c in state.chats.items() if f"@{c.get('username')}" == raw), None)
    else:
        chat_id = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if chat_id is None or chat_id not in state.chats:
        raise bad_request("chat not found")
    if chat_id in state.forbidden:
        raise ApiError(403, state.forbidden[chat_id])
    return chat_id


def _format(
    state: TelegramState, text: str, params: Params, entities_key: str, limit: int, too_long: str
) -> tuple[str, list[dict[str, Any]], str | None]:
    """Rendered text, entities and parse mode; raises can't parse / too long as Telegram does."""
    parse_mode = params.get("parse_mode") or None
    explicit = params.get(entities_key)
    if (explicit or parse_mode) and state.formatting_rejects > 0:
        state.formatting_rejects -= 1
        raise cant_parse("Can't find end of the entity starting at byte offset 0")
    entities: list[dict[str, Any]] = []
    if explicit is None and parse_mode is not None:
        mode = str(parse_mode).lower()
        if mode == "html":
            text, entities = parse_html(text)
        elif mode == "markdownv2":
            check_markdown_v2(text)
        elif mode != "markdown":
            raise bad_request("unsupported parse_mode")
    if utf16_len(text) > limit:
        raise bad_request(too_long)
    if explicit is not None:
        entities = check_entities(text, explicit)
    return text, entities, parse_mode


def _thread(state: TelegramState, chat_id: int, params: Params) -> tuple[int | None, bool]:
    thread_id = _optional_int(params, "message_thread_id")
    is_topic = thread_id is not None and bool(state.chats[chat_id].get("is_forum"))
    return thread_id, is_topic


def _reply_to(state: TelegramState, chat_id: int, params: Params) -> int | None:
    reply = params.get("reply_parameters")
    if isinstance(reply, dict):
        target, lenient = reply.get("message_id"), bool(reply.get("allow_sending_without_reply"))
    else:
        target = _optional_int(params, "reply_to_message_id")
        lenient = bool(params.get("allow_sending_without_reply"))
    if target is None:
        return None
    found = state.chat_messages.get(chat_id, {}).get(target)
    if found is None or found.deleted:
        if lenient:
            return None
        raise bad_request("message to be replied not found")
    return int(target)


def _new_bot_message(state: TelegramState, chat_id: int, params: Params) -> StoredMessage:
    """Thread and reply target are checked before the message takes an id."""
    thread_id, is_topic = _thread(state, chat_id, params)
    reply_to = _reply_to(state, chat_id, params)
    msg = state.new_message(chat_id, state.bot_user(), from_bot=True)
    msg.thread_id, msg.is_topic_message, msg.reply_to = thread_id, is_topic, reply_to
    msg.disable_notification = bool(params.get("disable_notification"))
    msg.reply_markup = params.get("reply_markup") or None
    return msg


# --- methods -------------------------------------------------------------------------------------


def get_me(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    return {
        **state.bot_user(),
        "can_join_groups": True,
        "can_read_all_group_messages": False,
        "supports_inline_queries": False,
        "can_connect_to_business": False,
        "has_main_web_app": False,
    }


def send_message(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    chat_id = _chat(state, params)
    raw_text = params.get("text")
    if not isinstance(raw_text, str) or not raw_text.strip():
        raise bad_request("message text is empty")
    text, entities, parse_mode = _format(
        state, raw_text, params, "entities", MESSAGE_LIMIT, "message is too long"
    )
    if not text.strip():
        raise bad_request("message text is empty")
    msg = _new_bot_message(state, chat_id, params)
    msg.text, msg.entities, msg.parse_mode = text, entities, parse_mode
    msg.link_preview_options = params.get("link_preview_options") or None
    msg.versions.append(text)
    return state.message_api(msg)


def edit_message_text(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    if params.get("inline_message_id"):
        return True  # inline messages are not modelled
    chat_id = _chat(state, params)
    message_id = _int(params, "message_id", "message identifier is not specified")
    msg = state.chat_messages.get(chat_id, {}).get(message_id)
    if msg is None or msg.deleted:
        raise bad_request("message to edit not found")
    if not msg.from_bot:
        raise bad_request("message can't be edited")
    if msg.kind != "text":
        raise bad_request("there is no text in the message to edit")
    raw_text = params.get("text")
    if not isinstance(raw_text, str) or not raw_text.strip():
        raise bad_request("message text is empty")
    text, entities, parse_mode = _format(
        state, raw_text, params, "entities", MESSAGE_LIMIT, "message is too long"
    )
    markup = params.get("reply_markup") or None
    if text == msg.text and entities == msg.entities and markup == msg.reply_markup:
        raise bad_request(NOT_MODIFIED)
    msg.text, msg.entities, msg.parse_mode, msg.reply_markup = text, entities, parse_mode, markup
    msg.edit_date = int(time.time())
    msg.versions.append(text)
    return state.message_api(msg)


def delete_message(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    chat_id = _chat(state, params)
    message_id = _int(params, "message_id", "message identifier is not specified")
    msg = state.chat_messages.get(chat_id, {}).get(message_id)
    if msg is None or msg.deleted:
        raise bad_request("message to delete not found")
    msg.deleted = True
    return True


def send_chat_action(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    chat_id = _chat(state, params)
    action = params.get("action")
    if action not in CHAT_ACTIONS:
        raise bad_request("wrong parameter action in request")
    thread_id = _optional_int(params, "message_thread_id")
    state.record_action(ChatAction(chat_id, str(action), thread_id, time.monotonic()))
    return True


def _upload(params: Params, uploads: Uploads, field: str) -> Upload | None:
    """The multipart part a send's ``field`` names: its own, or the one ``attach://name`` points at."""
    value = params.get(field)
    part = value.removeprefix("attach://") if isinstance(value, str) else field
    return uploads.get(part) or uploads.get(field)


def _media_file(state: TelegramState, params: Params, uploads: Uploads, field: str) -> StoredFile:
    """The file of a send: an upload (multipart part or ``attach://``), a known file_id, or a URL."""
    value = params.get(field)
    upload = _upload(params, uploads, field)
    folder, extension = ("photos", "jpg") if field == "photo" else ("documents", "bin")
    if upload is not None:
        if not upload.content:
            raise bad_request("file must be non-empty")
        extension = upload.filename.rpartition(".")[2] or extension
        return state.add_file(upload.content, folder, extension)
    if isinstance(value, str) and value in state.files:
        return state.files[value]
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return state.add_file(b"", folder, extension)
    raise bad_request(f"wrong file identifier/HTTP URL specified for {field}")


def _send_media(state: TelegramState, params: Params, uploads: Uploads, field: str) -> Any:
    chat_id = _chat(state, params)
    stored = _media_file(state, params, uploads, field)
    caption = params.get("caption") or ""
    text, entities, parse_mode = _format(
        state, str(caption), params, "caption_entities", CAPTION_LIMIT, "message caption is too long"
    )
    msg = _new_bot_message(state, chat_id, params)
    msg.kind, msg.text, msg.entities, msg.parse_mode = field, text, entities, parse_mode
    msg.versions.append(text)
    if field == "photo":
        msg.media = {"photo": [{**stored.api(), "width": 800, "height": 600}]}
    else:
        upload = _upload(params, uploads, field)
        name = upload.filename if upload else stored.file_path.rpartition("/")[2]
        mime = upload.content_type if upload else "application/octet-stream"
        msg.media = {"document": {**stored.api(), "file_name": name, "mime_type": mime}}
    return state.message_api(msg)


def send_document(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    return _send_media(state, params, uploads, "document")


def send_photo(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    return _send_media(state, params, uploads, "photo")


def get_file(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    stored = state.files.get(str(params.get("file_id") or ""))
    if stored is None:
        raise bad_request("invalid file_id")
    if len(stored.content) > state.max_download_bytes:
        raise bad_request("file is too big")
    return stored.api()


def answer_callback_query(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    if not params.get("callback_query_id"):
        raise bad_request("query is too old and response timeout expired or query ID is invalid")
    return True


def set_my_commands(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    commands = params.get("commands")
    if not isinstance(commands, list) or len(commands) > 100:
        raise bad_request("commands must be a JSON-serialized list of at most 100 BotCommand")
    for command in commands:
        if not isinstance(command, dict) or not _COMMAND_NAME.match(str(command.get("command", ""))):
            raise bad_request("BOT_COMMAND_INVALID")
        if not 1 <= len(str(command.get("description", "")).strip()) <= 256:
            raise bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
    key = (scope_key(params.get("scope")), str(params.get("language_code") or ""))
    state.command_sets[key] = [{"command": c["command"], "description": c["description"]} for c in commands]
    state.set_my_commands_calls += 1
    return True


def get_my_commands(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    return state.commands(params.get("scope"), str(params.get("language_code") or ""))


def delete_my_commands(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    state.command_sets.pop((scope_key(params.get("scope")), str(params.get("language_code") or "")), None)
    return True


def set_webhook(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    url = str(params.get("url") or "")
    secret = params.get("secret_token") or None
    if secret is not None and not _SECRET.match(str(secret)):
        raise bad_request("secret token contains unallowed characters")
    if url and not url.startswith(("http://", "https://")):
        raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
    if params.get("drop_pending_updates"):
        state.pending.clear()
    if isinstance(params.get("allowed_updates"), list):
        state.allowed_updates = params["allowed_updates"]
    if not url:
        return _delete_webhook_config(state)
    state.webhook_url, state.webhook_secret = url, (str(secret) if secret else None)
    state.webhook_max_connections = _optional_int(params, "max_connections") or 40
    state.webhook_last_error, state.webhook_paused = None, False
    return Reply(True, "Webhook was set")


def delete_webhook(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    if params.get("drop_pending_updates"):
        state.pending.clear()
    return _delete_webhook_config(state)


def _delete_webhook_config(state: TelegramState) -> Reply:
    was_set = bool(state.webhook_url)
    state.webhook_url, state.webhook_secret, state.webhook_last_error = "", None, None
    return Reply(True, "Webhook was deleted" if was_set else "Webhook is already deleted")


def get_webhook_info(state: TelegramState, params: Params, uploads: Uploads) -> Any:
    info: dict[str, Any] = {
        "url": state.webhook_url,
        "has_custom_certificate": False,
        "pending_update_count": len(state.pending),
    }
    if state.webhook_url:
        info["max_connections"] = state.webhook_max_connections
        if state.allowed_updates is not None:
            info["allowed_updates"] = list(state.allowed_updates)
        if state.webhook_last_error is not None:
            info["last_error_date"], info["last_error_message"] = state.webhook_last_error
    return info


def get_updates_params(params: Params) -> tuple[int, int, float, list[str] | None]:
    """(offset, limit, timeout, allowed_updates) of a getUpdates call."""
    offset = _optional_int(params, "offset") or 0
    limit = _optional_int(params, "limit") or 100
    timeout = params.get("timeout") or 0
    if not isinstance(timeout, int | float) or timeout < 0:
        raise bad_request("invalid timeout specified")
    allowed = params.get("allowed_updates")
    return offset, max(1, min(limit, 100)), float(timeout), allowed if isinstance(allowed, list) else None


def get_updates_conflict(state: TelegramState) -> ApiError | None:
    if state.webhook_url:
        return ApiError(
            409,
            "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete "
            "the webhook first",
        )
    return None


METHODS: dict[str, Handler] = {
    "getMe": get_me,
    "sendMessage": send_message,
    "editMessageText": edit_message_text,
    "deleteMessage": delete_message,
    "sendChatAction": send_chat_action,
    "sendDocument": send_document,
    "sendPhoto": send_photo,
    "getFile": get_file,
    "answerCallbackQuery": answer_callback_query,
    "setMyCommands": set_my_commands,
    "getMyCommands": get_my_commands,
    "deleteMyCommands": delete_my_commands,
    "setWebhook": set_webhook,
    "deleteWebhook": delete_webhook,
    "getWebhookInfo": get_webhook_info,
}
_CANONICAL = {name.lower(): name for name in [*METHODS, "getUpdates"]}


def canonical(name: str) -> str | None:
    """The documented spelling of a method name, or None for an unknown method."""
    return _CANONICAL.get(name.lower())
