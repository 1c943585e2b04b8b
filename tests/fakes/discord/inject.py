"""Inbound traffic: users writing to the bot, invoking slash commands, and redelivered events.

Every helper is synchronous and thread-safe, builds the payload Discord would send and dispatches
it on the gateway (``MESSAGE_CREATE``, ``MESSAGE_UPDATE``, ``MESSAGE_DELETE``,
``INTERACTION_CREATE``), returning a copy of that payload (ids are strings, as on the wire). Only
identified sessions receive it, as on Discord: inject once a client is connected
(``await fake.wait_for_session()`` or the client's ``on_ready``); while a client is reconnecting
with a resumable session it lands in the replay buffer, otherwise nobody gets it.
"""

from __future__ import annotations

import copy
import mimetypes
import secrets
import time
from collections.abc import Mapping
from typing import Any

from .messages import Upload, content_shape, message_api, resolve_mentions, store
from .records import Attachment, InteractionRecord, StoredMessage
from .sessions import DIRECT_MESSAGES, GUILD_MESSAGES
from .state import DiscordState
from .wire import iso
from .world import DM, GUILD_TEXT

OPTION_TYPES = {bool: 5, int: 4, float: 10, str: 3}
SUB_COMMAND, SUB_COMMAND_GROUP, USER, CHANNEL, ROLE, MENTIONABLE = 1, 2, 6, 7, 8, 9
APPLICATION_COMMAND = 2
MESSAGE_COMPONENT = 3
ACTION_ROW, BUTTON = 1, 2
ATTACHMENT_LIMIT = 10 * 1024 * 1024
IS_VOICE_MESSAGE = 1 << 13


class Inject(DiscordState):
    """The inject helpers of :class:`FakeDiscord`."""

    # --- messages ----------------------------------------------------------------------------------

    def dm_message(
        self,
        user_id: int,
        text: str,
        *,
        username: str | None = None,
        reply_to: int | None = None,
        files: Mapping[str, bytes] | None = None,
        untyped: bool = False,
        voice: bytes | None = None,
    ) -> dict[str, Any]:
        """``user_id`` writes ``text`` to the bot in their DM channel (created on first use).

        ``files`` are attached with a content type guessed from their names, or with none (``untyped``,
        as Discord leaves it out for some uploads); ``voice`` sends a voice message (an Ogg file with a
        duration and a waveform, flag ``IS_VOICE_MESSAGE``)."""
        with self.lock:
            self.add_user(user_id, username)
            channel_id = self.dm_channel(user_id)
            return self._user_message(
                channel_id, user_id, text, reply_to=reply_to, files=files, untyped=untyped, voice=voice
            )

    def guild_message(
        self,
        channel_id: int,
        user_id: int,
        text: str,
        *,
        username: str | None = None,
        mention_bot: bool = False,
        reply_to_bot_message_id: int | None = None,
        reply_to: int | None = None,
        ping_reply: bool = True,
        thread_id: int | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """``user_id`` writes in a guild text channel, or in ``thread_id`` under it.

        ``mention_bot`` prefixes ``<@BOT_ID> `` (and puts the bot in ``mentions``).
        ``reply_to_bot_message_id`` replies to one of the bot's messages (``message_reference`` +
        ``referenced_message``, type 19; with ``ping_reply`` the bot is in ``mentions`` too, as with
        Discord's default reply ping); ``reply_to`` replies to any message in the channel.
        """
        with self.lock:
            channel = self.world.channels[thread_id if thread_id is not None else channel_id]
            if thread_id is not None and channel.parent_id != channel_id:
                raise ValueError(f"thread {thread_id} is not under channel {channel_id}")
            if channel.guild_id is None or (channel.type != GUILD_TEXT and not channel.is_thread):
                raise ValueError(f"channel {channel.id} is not a guild text channel or thread")
            self.add_member(channel.guild_id, user_id, username)
            if reply_to_bot_message_id is not None:
                target = self.messages_by_id.get(reply_to_bot_message_id)
                if target is None or target.author_id != self.bot_id or target.channel_id != channel.id:
                    raise ValueError(f"no bot message {reply_to_bot_message_id} in channel {channel.id}")
                reply_to = reply_to_bot_message_id
            if mention_bot and f"<@{self.bot_id}>" not in text and f"<@!{self.bot_id}>" not in text:
                text = f"<@{self.bot_id}> {text}"
            return self._user_message(
                channel.id, user_id, text, reply_to=reply_to, files=files, ping_reply=ping_reply
            )

    def edit_user_message(self, message_id: int, text: str) -> dict[str, Any]:
        """The author edits an injected message: ``MESSAGE_UPDATE`` with the new content."""
        with self.lock:
            msg = self.messages_by_id[message_id]
            msg.content, msg.edited_timestamp = text, iso()
            msg.versions.append(text)
            payload = message_api(self, msg)
            intent = GUILD_MESSAGES if msg.guild_id is not None else DIRECT_MESSAGES
            self.dispatch("MESSAGE_UPDATE", payload, intent, content_shape(self, msg))
            return payload

    def delete_user_message(self, message_id: int) -> dict[str, Any]:
        """The author deletes a message: ``MESSAGE_DELETE``."""
        with self.lock:
            msg = self.messages_by_id[message_id]
            msg.deleted = True
            data: dict[str, Any] = {"id": str(msg.id), "channel_id": str(msg.channel_id)}
            if msg.guild_id is not None:
                data["guild_id"] = str(msg.guild_id)
            intent = GUILD_MESSAGES if msg.guild_id is not None else DIRECT_MESSAGES
            self.dispatch("MESSAGE_DELETE", data, intent)
            return data

    def replay(self, message_id: int) -> dict[str, Any]:
        """Dispatch the same ``MESSAGE_CREATE`` again (same id and content), as a platform that
        redelivers after a reconnect would: the bot must not answer twice."""
        with self.lock:
            msg = self.messages_by_id[message_id]
            payload = copy.deepcopy(self.inbound.get(message_id)) or message_api(self, msg)
            intent = GUILD_MESSAGES if msg.guild_id is not None else DIRECT_MESSAGES
            self.dispatch("MESSAGE_CREATE", payload, intent, content_shape(self, msg))
            return payload

    def _user_message(
        self,
        channel_id: int,
        user_id: int,
        text: str,
        *,
        reply_to: int | None,
        files: Mapping[str, bytes] | None,
        ping_reply: bool = True,
        untyped: bool = False,
        voice: bytes | None = None,
    ) -> dict[str, Any]:
        channel = self.world.channels[channel_id]
        reference = None
        replied_author = None
        if reply_to is not None:
            target = self.messages_by_id.get(reply_to)
            if target is None or target.channel_id != channel_id:
                raise ValueError(f"no message {reply_to} in channel {channel_id} to reply to")
            reference = {"message_id": str(reply_to), "channel_id": str(channel_id)}
            if channel.guild_id is not None:
                reference["guild_id"] = str(channel.guild_id)
            replied_author = target.author_id if ping_reply else None
        users, roles, everyone = resolve_mentions(self, text, None, replied_author)
        msg = StoredMessage(
            id=self.snowflakes.next(),
            channel_id=channel_id,
            guild_id=channel.guild_id,
            author_id=user_id,
            content=text,
            timestamp=iso(),
            type=19 if reference else 0,
            message_reference=reference,
            mentions=users,
            mention_roles=roles,
            mention_everyone=everyone,
            versions=[text],
        )
        uploads = [
            Upload(f"files[{i}]", name, mimetypes.guess_type(name)[0] or "application/octet-stream", data)
            for i, (name, data) in enumerate((files or {}).items())
        ]
        msg.attachments = [
            (self.snowflakes.next(), Attachment(u.filename, None if untyped else u.content_type, u.data))
            for u in uploads
        ]
        if voice is not None:
            msg.attachments.append(
                (self.snowflakes.next(), Attachment("voice-message.ogg", "audio/ogg", voice, voice=True))
            )
            msg.flags |= IS_VOICE_MESSAGE
        store(self, msg)
        payload = message_api(self, msg)
        self.inbound[msg.id] = copy.deepcopy(payload)
        intent = GUILD_MESSAGES if channel.type != DM else DIRECT_MESSAGES
        self.dispatch("MESSAGE_CREATE", payload, intent, content_shape(self, msg))
        return payload

    # --- interactions ------------------------------------------------------------------------------

    def interaction(
        self,
        command_name: str,
        options: Mapping[str, Any] | list[dict[str, Any]] | None = None,
        *,
        user_id: int,
        channel_id: int | None = None,
        guild_id: int | None = None,
        username: str | None = None,
    ) -> dict[str, Any]:
        """``user_id`` invokes slash command ``command_name`` (``"group sub"`` for subcommands):
        ``INTERACTION_CREATE`` type 2 with an id and a token to answer with.

        ``options`` maps option names to values; their types come from the synced command (else
        from the Python type); raw option dicts are sent as they are. Without ``channel_id`` the
        command is used in the user's DM with the bot.
        """
        with self.lock:
            self.add_user(user_id, username)
            if channel_id is None:
                channel_id = self.dm_channel(user_id)
            channel = self.world.channels[channel_id]
            guild_id = guild_id if guild_id is not None else channel.guild_id
            if guild_id is not None:
                self.add_member(guild_id, user_id, username)
            root, *subs = command_name.split()
            command, scope = self._find_command(root, guild_id)
            data: dict[str, Any] = {"name": root, "type": 1}
            data["id"] = command["id"] if command else str(self.snowflakes.next())
            if scope is not None:
                data["guild_id"] = str(scope)
            resolved: dict[str, dict[str, Any]] = {}
            schema = command.get("options") if command else None
            for sub in subs:  # descend into subcommand groups / subcommands
                spec = next((o for o in schema or [] if o.get("name") == sub), None)
                schema = spec.get("options") if spec else None
            leaf = self._options(options, schema, guild_id, resolved)
            for sub in reversed(subs):
                spec_type = (
                    SUB_COMMAND if leaf is None or all(o["type"] > 2 for o in leaf) else SUB_COMMAND_GROUP
                )
                leaf = [{"name": sub, "type": spec_type, "options": leaf or []}]
            if leaf:
                data["options"] = leaf
            if resolved:
                data["resolved"] = resolved
            return self._dispatch_interaction(APPLICATION_COMMAND, root, data, user_id, channel_id, guild_id)

    def press_button(
        self, message_id: int, label: str, *, user_id: int, username: str | None = None
    ) -> dict[str, Any]:
        """``user_id`` presses the button ``label`` under the bot's message ``message_id``:
        ``INTERACTION_CREATE`` type 3 (a message component) with the button's ``custom_id`` and the
        message, an id and a token to answer with. Raises ``ValueError`` when the message shows no
        such button (Discord's client would not show it)."""
        with self.lock:
            msg = self.messages_by_id.get(message_id)
            if msg is None or msg.author_id != self.bot_id or msg.deleted:
                raise ValueError(f"no bot message {message_id}")
            buttons = [
                item
                for row in msg.components
                if row.get("type") == ACTION_ROW
                for item in row.get("components", [])
                if item.get("type") == BUTTON
            ]
            found = [item for item in buttons if item.get("label") == label]
            if not found:
                shown = [button.get("label") for button in buttons]
                raise ValueError(f"message {message_id} has no button {label!r} (it has {shown})")
            self.add_user(user_id, username)
            channel = self.world.channels[msg.channel_id]
            if channel.guild_id is not None:
                self.add_member(channel.guild_id, user_id, username)
            data = {"custom_id": found[0]["custom_id"], "component_type": BUTTON}
            extra = {"message": message_api(self, msg)}
            name = found[0]["custom_id"]
            return self._dispatch_interaction(
                MESSAGE_COMPONENT, name, data, user_id, msg.channel_id, channel.guild_id, extra
            )

    def _find_command(self, name: str, guild_id: int | None) -> tuple[dict[str, Any] | None, int | None]:
        for scope in ([guild_id] if guild_id is not None else []) + [None]:
            for command in self.registered_commands.get(scope, []):
                if command["name"] == name and int(command.get("type", 1)) == 1:
                    return command, scope
        return None, None

    def _options(
        self,
        options: Mapping[str, Any] | list[dict[str, Any]] | None,
        schema: list[dict[str, Any]] | None,
        guild_id: int | None,
        resolved: dict[str, dict[str, Any]],
    ) -> list[dict[str, Any]] | None:
        if options is None:
            return None
        if isinstance(options, list):
            return copy.deepcopy(options)
        types = {o["name"]: int(o["type"]) for o in schema or [] if "name" in o and "type" in o}
        out = []
        for name, value in options.items():
            kind = types.get(name) or OPTION_TYPES.get(type(value), 3)
            if kind in (USER, CHANNEL, ROLE, MENTIONABLE):
                self._resolve(kind, int(value), guild_id, resolved)
                value = str(value)
            out.append({"name": name, "type": kind, "value": value})
        return out

    def _resolve(
        self, kind: int, target: int, guild_id: int | None, resolved: dict[str, dict[str, Any]]
    ) -> None:
        if kind == USER:
            self.add_user(target)
            if guild_id is not None:
                self.add_member(guild_id, target)
        if kind in (USER, MENTIONABLE) and target in self.world.users:
            resolved.setdefault("users", {})[str(target)] = self.world.user_api(target)
            if guild_id is not None and target in self.world.guilds[guild_id].members:
                member = self.world.member_api(guild_id, target, with_user=False)
                member["permissions"] = str(self.world.member_permissions(guild_id, target))
                resolved.setdefault("members", {})[str(target)] = member
        elif kind == CHANNEL and target in self.world.channels:
            channel = self.world.channel_api(target)
            channel["permissions"] = (
                str(self.world.member_permissions(guild_id, self.bot_id)) if guild_id else "0"
            )
            resolved.setdefault("channels", {})[str(target)] = channel
        elif kind == ROLE and guild_id is not None and target in self.world.guilds[guild_id].roles:
            resolved.setdefault("roles", {})[str(target)] = self.world.guilds[guild_id].roles[target].api()

    def _dispatch_interaction(
        self,
        kind: int,
        name: str,
        data: dict[str, Any],
        user_id: int,
        channel_id: int,
        guild_id: int | None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        interaction_id = self.snowflakes.next()
        token = f"FAKE-INTERACTION-{interaction_id}-{secrets.token_hex(16)}"
        channel = self.world.channel_api(channel_id, me=self.bot_id)
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": str(self.application_id),
            "type": kind,
            "data": data,
            "channel_id": str(channel_id),
            "channel": channel,
            "token": token,
            "version": 1,
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": ATTACHMENT_LIMIT,
        }
        if guild_id is not None:
            member = self.world.member_api(guild_id, user_id)
            member["permissions"] = str(self.world.member_permissions(guild_id, user_id))
            payload.update(
                guild_id=str(guild_id),
                guild={"id": str(guild_id), "locale": "en-US", "features": []},
                guild_locale="en-US",
                member=member,
                app_permissions=str(self.world.member_permissions(guild_id, self.bot_id)),
                authorizing_integration_owners={"0": str(guild_id)},
                context=0,
            )
        else:
            payload.update(
                user=self.world.user_api(user_id),
                app_permissions=str(1 << 11 | 1 << 14 | 1 << 15),
                authorizing_integration_owners={"0": str(user_id)},
                context=1,
            )
        payload.update(extra or {})
        self.interactions[interaction_id] = InteractionRecord(
            interaction_id, token, kind, name, channel_id, guild_id, user_id, time.monotonic(), payload
        )
        self.dispatch("INTERACTION_CREATE", payload)
        return copy.deepcopy(payload)
