"""The fake's mutable state and the test-facing controls, behind one re-entrant lock.

The server may run on another thread (``serve_in_thread``) while a test pushes updates or reads
messages, so every read-modify-write holds :attr:`TelegramState.lock`. After a change that a
waiting long poll or the webhook deliverer should see, :meth:`TelegramState._changed` is called;
the server overrides it to wake them on its own loop.
"""

from __future__ import annotations

import copy
import io
import threading
import time
from typing import Any

from .formatting import detect_entities
from .records import (
    ChatAction,
    Fault,
    RecordedCall,
    SentMessage,
    StoredFile,
    StoredMessage,
    WebhookDelivery,
)
from .wire import dumps

DEFAULT_TOKEN = "123456:TEST-TOKEN"
# What Telegram sends when allowed_updates was never set (or set to []).
DEFAULT_EXCLUDED_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
DEFAULT_FAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
    500: "Internal Server Error",
    502: "Bad Gateway",
}


def update_type(update: dict[str, Any]) -> str:
    return next((key for key in update if key != "update_id"), "")


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class TelegramState:
    """Chats, messages, pending updates, webhook, commands, faults and the call log of one bot."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        username: str = "herald_bot",
        first_name: str = "Herald",
        privacy_mode: bool = False,
        first_update_id: int = 1,
    ) -> None:
        self.lock = threading.RLock()
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.first_name = first_name
        # False: the bot sees every group message (privacy off, or the bot is an admin).
        # True: group_message() only queues commands, mentions of the bot and replies to it.
        self.privacy_mode = privacy_mode
        self.webhook_autodeliver = True  # inject helpers POST to a set webhook in the background
        self.chats: dict[int, dict[str, Any]] = {}
        self.users: dict[int, dict[str, Any]] = {}
        self.chat_messages: dict[int, dict[int, StoredMessage]] = {}
        self.pending: list[dict[str, Any]] = []  # unconfirmed updates, by update_id
        self.history: dict[int, dict[str, Any]] = {}  # every update ever queued
        self.hidden_updates: list[dict[str, Any]] = []  # withheld by privacy mode
        self.allowed_updates: list[str] | None = None
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        self.webhook_max_connections = 40
        self.webhook_last_error: tuple[int, str] | None = None
        self.webhook_paused = False  # a delivery failed: wait for retry_webhook()
        self.command_sets: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.set_my_commands_calls = 0
        self.faults: list[Fault] = []
        self.formatting_rejects = 0
        self.network_faults: dict[str, int] = {}
        self.slow: dict[str, list[float]] = {}  # method -> delays of its next answers
        self.forbidden: dict[int, str] = {}
        self.files: dict[str, StoredFile] = {}
        self.max_download_bytes = 20 * 1024 * 1024  # larger files: getFile answers "file is too big"
        self.in_flight = 0  # requests being handled, long polls excluded
        self._calls: list[RecordedCall] = []
        self._chat_actions: list[ChatAction] = []
        self._deliveries: list[WebhookDelivery] = []
        self._next_update_id = first_update_id
        self._next_message_id: dict[int, int] = {}
        self._file_counter = 0

    def _changed(self) -> None:
        """Hook: the server wakes long polls and the webhook deliverer."""

    # --- injecting inbound traffic ---------------------------------------------------------------

    def register_chat(
        self,
        chat_id: int,
        *,
        type: str | None = None,
        title: str | None = None,
        is_forum: bool = False,
        first_name: str = "User",
        username: str | None = None,
    ) -> dict[str, Any]:
        """Make a chat known (sends to unknown chats fail with "chat not found"); returns it."""
        kind = type or ("private" if chat_id > 0 else "supergroup")
        chat: dict[str, Any] = {"id": chat_id, "type": kind}
        if kind == "private":
            chat["first_name"] = first_name
        else:
            chat["title"] = title or "Group"
        if username:
            chat["username"] = username
        if is_forum:
            chat["is_forum"] = True
        with self.lock:
            self.chats[chat_id] = chat
            self.chat_messages.setdefault(chat_id, {})
        return copy.deepcopy(chat)

    def private_message(
        self,
        user_id: int,
        text: str,
        *,
        first_name: str = "User",
        username: str | None = None,
        reply_to: int | None = None,
        document: bytes | None = None,
        photo: bytes | None = None,
        voice: bytes | None = None,
        video_note: bytes | None = None,
        file_name: str = "document.txt",
        mime_type: str = "text/plain",
    ) -> dict[str, Any]:
        """A user writes to the bot; ``document``/``photo``/``voice``/``video_note`` bytes attach a file
        (``text`` = caption). A photo's sizes are read from its bytes; a voice note is an Ogg/Opus file;
        a video note is a round video message (an MP4 without a name)."""
        with self.lock:
            sender = self._user(user_id, first_name, username)
            self.register_chat(user_id, type="private", first_name=first_name, username=username)
            media = self._media(document, photo, voice, file_name, mime_type)
            if video_note is not None:
                stored = self.add_file(video_note, "video_notes", "mp4")
                media = {"video_note": {**stored.api(), "length": 240, "duration": 4}}
            msg = self._user_message(user_id, sender, text, reply_to=reply_to, media=media)
            return self._enqueue({"message": self.message_api(msg)})

    def group_message(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        title: str = "Group",
        supergroup: bool = True,
        is_forum: bool = False,
        thread_id: int | None = None,
        mention_bot: bool = False,
        reply_to_bot_message_id: int | None = None,
        first_name: str = "User",
        username: str | None = None,
        command: bool = False,
    ) -> dict[str, Any]:
        """A user writes in a group. ``command`` prefixes "/" if missing; ``mention_bot`` prefixes
        "@herald_bot " if the text does not mention the bot; entities are detected as Telegram does.
        With ``privacy_mode`` a message the bot would not see is kept in ``hidden_updates`` and
        returned with ``update_id`` None instead of being queued.
        """
        if command and not text.startswith("/"):
            text = "/" + text
        if mention_bot and f"@{self.username}".lower() not in text.lower():
            text = f"@{self.username} {text}"
        with self.lock:
            sender = self._user(user_id, first_name, username)
            kind = "supergroup" if supergroup else "group"
            self.register_chat(chat_id, type=kind, title=title, is_forum=is_forum)
            if reply_to_bot_message_id is not None:
                target = self.chat_messages[chat_id].get(reply_to_bot_message_id)
                if target is None or not target.from_bot:
                    raise ValueError(f"no bot message {reply_to_bot_message_id} in chat {chat_id}")
            msg = self._user_message(
                chat_id, sender, text, reply_to=reply_to_bot_message_id, thread_id=thread_id
            )
            msg.is_topic_message = is_forum and thread_id is not None
            update_body = {"message": self.message_api(msg)}
            if self.privacy_mode and not self._visible_in_privacy_mode(msg):
                hidden = {"update_id": None, **update_body}
                self.hidden_updates.append(hidden)
                return copy.deepcopy(hidden)
            return self._enqueue(update_body)

    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue any raw update; ``update_id`` is assigned when missing. Chats in it become known."""
        with self.lock:
            body = copy.deepcopy(update)
            self._learn(body)
            self._store_raw_message(body.get("message"))
            update_id = body.pop("update_id", None)
            return self._enqueue(body, update_id)

    def redeliver(self, update_id: int) -> dict[str, Any]:
        """Queue an already confirmed update again with the same update_id (a restarted poller)."""
        with self.lock:
            update = self.history[update_id]
            if all(u["update_id"] != update_id for u in self.pending):
                self.pending.append(update)
                self.pending.sort(key=lambda u: int(u["update_id"]))
            out = copy.deepcopy(update)
        self._changed()
        return out

    # --- faults --------------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        *,
        retry_after: float | None = None,
        count: int = 1,
        description: str | None = None,
    ) -> None:
        """Answer the next ``count`` calls of ``method`` ("*" for any but getUpdates) with an error.

        A 429 carries ``parameters.retry_after`` (default 1 s), as Telegram's flood control does.
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        with self.lock:
            self.faults.append(Fault(method, status, count, retry_after, description))

    def reject_formatting_next(self, count: int = 1) -> None:
        """The next ``count`` sends/edits carrying ``entities`` or ``parse_mode`` fail with 400
        "can't parse entities"; plain-text sends pass and do not use up the count."""
        with self.lock:
            self.formatting_rejects += count

    def fail_network_next(self, method: str, count: int = 1) -> None:
        """Drop the connection without an answer on the next ``count`` calls of ``method``."""
        with self.lock:
            self.network_faults[method] = self.network_faults.get(method, 0) + count

    def slow_next(self, method: str, seconds: float, count: int = 1) -> None:
        """Answer the next ``count`` calls of ``method`` after ``seconds``; a client that closes the
        connection meanwhile gets its call recorded with status 499."""
        with self.lock:
            self.slow.setdefault(method, []).extend([seconds] * count)

    def take_delay(self, method: str) -> float:
        delays = self.slow.get(method)
        return delays.pop(0) if delays else 0.0

    def forbid_chat(self, chat_id: int, description: str = "Forbidden: bot was blocked by the user") -> None:
        """Every later call aimed at ``chat_id`` fails with 403 (the user blocked the bot)."""
        with self.lock:
            self.forbidden[chat_id] = description

    # --- observing -----------------------------------------------------------------------------

    @property
    def calls(self) -> list[RecordedCall]:
        """Every Bot API call so far, in arrival order (a copy of the list)."""
        with self.lock:
            return list(self._calls)

    def calls_to(self, method: str) -> list[RecordedCall]:
        with self.lock:
            return [c for c in self._calls if c.method == method]

    def messages(self, chat_id: int, thread_id: int | None = None) -> list[SentMessage]:
        """The bot's messages in a chat (or one topic of it), oldest first, as they are now."""
        with self.lock:
            stored = self.chat_messages.get(chat_id, {})
            return [
                m.snapshot()
                for _, m in sorted(stored.items())
                if m.from_bot and (thread_id is None or m.thread_id == thread_id)
            ]

    def file_content(self, file_id: str) -> bytes:
        """The bytes of a file the fake holds (one a bot uploaded: ``message.media["voice"]["file_id"]``)."""
        with self.lock:
            return self.files[file_id].content

    def chat_actions(self, chat_id: int | None = None) -> list[ChatAction]:
        with self.lock:
            return [a for a in self._chat_actions if chat_id is None or a.chat_id == chat_id]

    def typing_actions(self, chat_id: int) -> list[ChatAction]:
        return [a for a in self.chat_actions(chat_id) if a.action == "typing"]

    def commands(self, scope: dict[str, Any] | None = None, language_code: str = "") -> list[dict[str, Any]]:
        """The command list currently set for ``scope`` (default scope) and language."""
        with self.lock:
            return copy.deepcopy(self.command_sets.get((scope_key(scope), language_code), []))

    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed (by a later getUpdates offset, or a 2xx from the webhook)."""
        with self.lock:
            return copy.deepcopy(self.pending)

    @property
    def webhook_deliveries(self) -> list[WebhookDelivery]:
        with self.lock:
            return list(self._deliveries)

    def describe(self, last_calls: int = 15) -> str:
        """A summary of recent activity, for failure messages."""
        with self.lock:
            lines = [f"last {min(last_calls, len(self._calls))} of {len(self._calls)} calls:"]
            for call in self._calls[-last_calls:]:
                params = dumps({k: v for k, v in call.params.items() if k != "commands"})
                lines.append(f"  {call.method} -> {call.status} {call.description or ''} {params[:160]}")
            lines.append(f"pending updates: {[u['update_id'] for u in self.pending]}")
            if self.webhook_url:
                lines.append(f"webhook: {self.webhook_url} paused={self.webhook_paused}")
            for chat_id, stored in self.chat_messages.items():
                bot = [m for m in stored.values() if m.from_bot]
                for m in bot[-5:]:
                    flag = " (deleted)" if m.deleted else ""
                    lines.append(
                        f"  chat {chat_id} #{m.message_id} thread={m.thread_id}: {m.text[:80]!r}{flag}"
                    )
            return "\n".join(lines)

    # --- used by the method handlers and the server (lock held) ----------------------------------

    def bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": self.first_name, "username": self.username}

    def record_call(self, call: RecordedCall) -> None:
        self._calls.append(call)

    def record_action(self, action: ChatAction) -> None:
        self._chat_actions.append(action)

    def record_delivery(self, delivery: WebhookDelivery) -> None:
        self._deliveries.append(delivery)

    def take_fault(self, method: str) -> Fault | None:
        for fault in self.faults:
            if fault.method == method or (fault.method == "*" and method != "getUpdates"):
                fault.count -= 1
                if fault.count <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    def fault_body(self, fault: Fault) -> dict[str, Any]:
        description = fault.description or DEFAULT_FAULT_DESCRIPTIONS.get(fault.status, "Error")
        if fault.status == 429 and fault.description is None:
            description = f"Too Many Requests: retry after {_seconds(fault.retry_after or 1)}"
        body: dict[str, Any] = {"ok": False, "error_code": fault.status, "description": description}
        if fault.retry_after is not None:
            body["parameters"] = {"retry_after": fault.retry_after}
        return body

    def take_network_fault(self, method: str) -> bool:
        left = self.network_faults.get(method, 0)
        if left <= 0:
            return False
        self.network_faults[method] = left - 1
        return True

    def confirm(self, offset: int) -> None:
        """Apply a getUpdates ``offset``: ids below it are confirmed; negative keeps the last -offset."""
        if offset > 0:
            self.pending = [u for u in self.pending if int(u["update_id"]) >= offset]
        elif offset < 0:
            self.pending = self.pending[offset:]

    def select_updates(self, limit: int, allowed: list[str] | None) -> list[dict[str, Any]]:
        """Up to ``limit`` pending updates; updates of types not allowed are dropped for good."""
        if allowed:
            self.pending = [u for u in self.pending if update_type(u) in allowed]
        else:
            self.pending = [u for u in self.pending if update_type(u) not in DEFAULT_EXCLUDED_UPDATES]
        return copy.deepcopy(self.pending[:limit])

    def new_message(self, chat_id: int, sender: dict[str, Any], *, from_bot: bool) -> StoredMessage:
        message_id = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = message_id + 1
        msg = StoredMessage(chat_id, message_id, int(time.time()), from_bot, sender)
        self.chat_messages.setdefault(chat_id, {})[message_id] = msg
        return msg

    def message_api(self, msg: StoredMessage, *, with_reply: bool = True) -> dict[str, Any]:
        """The Bot API ``Message`` object for a stored message."""
        out: dict[str, Any] = {
            "message_id": msg.message_id,
            "from": copy.deepcopy(msg.sender),
            "chat": copy.deepcopy(self.chats[msg.chat_id]),
            "date": msg.date,
        }
        if msg.thread_id is not None:
            out["message_thread_id"] = msg.thread_id
        if msg.is_topic_message:
            out["is_topic_message"] = True
        if with_reply and msg.reply_to is not None:
            target = self.chat_messages[msg.chat_id].get(msg.reply_to)
            if target is not None:
                out["reply_to_message"] = self.message_api(target, with_reply=False)
        if msg.edit_date is not None:
            out["edit_date"] = msg.edit_date
        if msg.kind == "text":
            out["text"] = msg.text
            if msg.entities:
                out["entities"] = copy.deepcopy(msg.entities)
            if msg.link_preview_options:
                out["link_preview_options"] = copy.deepcopy(msg.link_preview_options)
        else:
            out.update(copy.deepcopy(msg.media))
            if msg.text:
                out["caption"] = msg.text
            if msg.entities:
                out["caption_entities"] = copy.deepcopy(msg.entities)
        if msg.reply_markup:
            out["reply_markup"] = copy.deepcopy(msg.reply_markup)
        return out

    def add_file(self, content: bytes, folder: str, extension: str) -> StoredFile:
        self._file_counter += 1
        n = self._file_counter
        stored = StoredFile(f"FILE{n:04d}", f"U{n:04d}", f"{folder}/file_{n}.{extension}", content)
        self.files[stored.file_id] = stored
        return stored

    def _enqueue(self, body: dict[str, Any], update_id: int | None = None) -> dict[str, Any]:
        with self.lock:
            if update_id is None:
                update_id = self._next_update_id
            self._next_update_id = max(self._next_update_id, update_id + 1)
            update = {"update_id": update_id, **body}
            self.history[update_id] = update
            self.pending.append(update)
            self.pending.sort(key=lambda u: int(u["update_id"]))
            out = copy.deepcopy(update)
        self._changed()
        return out

    def _user(self, user_id: int, first_name: str, username: str | None) -> dict[str, Any]:
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        self.users[user_id] = user
        return user

    def _user_message(
        self,
        chat_id: int,
        sender: dict[str, Any],
        text: str,
        *,
        reply_to: int | None = None,
        thread_id: int | None = None,
        media: dict[str, Any] | None = None,
    ) -> StoredMessage:
        if reply_to is not None and reply_to not in self.chat_messages.get(chat_id, {}):
            raise ValueError(f"no message {reply_to} in chat {chat_id} to reply to")
        msg = self.new_message(chat_id, sender, from_bot=False)
        msg.text, msg.entities, msg.reply_to, msg.thread_id = text, detect_entities(text), reply_to, thread_id
        msg.versions.append(text)
        if media:
            msg.kind = next(iter(media))
            msg.media = media
        return msg

    def _media(
        self, document: bytes | None, photo: bytes | None, voice: bytes | None, file_name: str, mime: str
    ) -> dict[str, Any]:
        if document is not None:
            stored = self.add_file(document, "documents", file_name.rpartition(".")[2] or "bin")
            meta = {"file_name": file_name, "mime_type": mime}
            return {"document": {**stored.api(), **meta}}
        if photo is not None:
            return {"photo": self._photo_sizes(photo)}
        if voice is not None:
            stored = self.add_file(voice, "voice", "oga")
            return {"voice": {**stored.api(), "duration": 3, "mime_type": "audio/ogg"}}
        return {}

    def _photo_sizes(self, photo: bytes) -> list[dict[str, Any]]:
        """As Telegram sends a photo: a thumbnail and the full size (the full size last)."""
        try:
            from PIL import Image  # loaded with the first photo (benchmarks measure a process without it)

            width, height = Image.open(io.BytesIO(photo)).size
        except (OSError, ValueError):  # a damaged file still arrives as a photo
            width, height = 800, 600
        thumb = self.add_file(photo[:64], "photos", "jpg")
        full = self.add_file(photo, "photos", "jpg")
        small = max(1, width * 90 // max(width, height)), max(1, height * 90 // max(width, height))
        return [
            {**thumb.api(), "width": small[0], "height": small[1]},
            {**full.api(), "width": width, "height": height},
        ]

    def _visible_in_privacy_mode(self, msg: StoredMessage) -> bool:
        if msg.reply_to is not None and self.chat_messages[msg.chat_id][msg.reply_to].from_bot:
            return True
        for entity in msg.entities:
            word = msg.text.encode("utf-16-le")[
                2 * entity["offset"] : 2 * (entity["offset"] + entity["length"])
            ]
            value = word.decode("utf-16-le").lower()
            if entity["type"] == "mention" and value == f"@{self.username}".lower():
                return True
            if entity["type"] == "bot_command" and (
                "@" not in value or value.endswith(f"@{self.username}".lower())
            ):
                return True
        return False

    def _store_raw_message(self, raw: Any) -> None:
        """Keep a pushed message so the bot can reply to it; later ids in its chat continue after it."""
        if not isinstance(raw, dict) or not isinstance(raw.get("message_id"), int):
            return
        chat_id, message_id = raw["chat"]["id"], raw["message_id"]
        sender = raw.get("from") or {}
        msg = StoredMessage(
            chat_id, message_id, int(raw.get("date", time.time())), bool(sender.get("is_bot")), sender
        )
        msg.text = str(raw.get("text") or raw.get("caption") or "")
        msg.entities = list(raw.get("entities") or raw.get("caption_entities") or [])
        msg.thread_id, msg.is_topic_message = raw.get("message_thread_id"), bool(raw.get("is_topic_message"))
        self.chat_messages.setdefault(chat_id, {})[message_id] = msg
        self._next_message_id[chat_id] = max(self._next_message_id.get(chat_id, 1), message_id + 1)

    def _learn(self, value: Any) -> None:
        """Register every chat and user found in a raw update."""
        if isinstance(value, dict):
            chat = value.get("chat")
            if isinstance(chat, dict) and isinstance(chat.get("id"), int) and "type" in chat:
                self.chats.setdefault(chat["id"], copy.deepcopy(chat))
                self.chat_messages.setdefault(chat["id"], {})
            for item in value.values():
                self._learn(item)
        elif isinstance(value, list):
            for item in value:
                self._learn(item)


def scope_key(scope: dict[str, Any] | None) -> str:
    if not scope or scope == {"type": "default"}:
        return "default"
    return dumps(dict(sorted(scope.items())))
