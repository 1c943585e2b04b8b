"""Who and where: users, guilds, members, roles, channels and threads, and their API payloads.

The payloads are what discord.py parses: ``GUILD_CREATE`` carries channels, threads, members and
roles (threads are channels of type 11/12 with ``parent_id`` and ``thread_metadata``), DM channels
are type 1 with ``recipients``. Builders return fresh dicts, so callers may mutate them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .wire import iso, snowflake_time

GUILD_TEXT = 0
DM = 1
GUILD_CATEGORY = 4
PUBLIC_THREAD = 11
PRIVATE_THREAD = 12
THREAD_TYPES = frozenset({10, PUBLIC_THREAD, PRIVATE_THREAD})

# Permission bits (https://discord.com/developers/docs/topics/permissions).
ADD_REACTIONS = 1 << 6
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
MANAGE_MESSAGES = 1 << 13
EMBED_LINKS = 1 << 14
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
MENTION_EVERYONE = 1 << 17
USE_APPLICATION_COMMANDS = 1 << 31
CREATE_PUBLIC_THREADS = 1 << 35
SEND_MESSAGES_IN_THREADS = 1 << 38
EVERYONE_PERMISSIONS = (
    ADD_REACTIONS
    | VIEW_CHANNEL
    | SEND_MESSAGES
    | EMBED_LINKS
    | ATTACH_FILES
    | READ_MESSAGE_HISTORY
    | USE_APPLICATION_COMMANDS
    | CREATE_PUBLIC_THREADS
    | SEND_MESSAGES_IN_THREADS
)
BOT_ROLE_PERMISSIONS = EVERYONE_PERMISSIONS | MANAGE_MESSAGES | MENTION_EVERYONE


@dataclass
class User:
    id: int
    username: str
    global_name: str | None = None
    bot: bool = False

    def api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "public_flags": 0,
        }
        if self.bot:
            out["bot"] = True
        return out


@dataclass
class Role:
    id: int
    name: str
    permissions: int
    position: int = 0
    managed: bool = False

    def api(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": self.position,
            "permissions": str(self.permissions),
            "managed": self.managed,
            "mentionable": False,
            "flags": 0,
        }


@dataclass
class Member:
    user_id: int
    roles: list[int] = field(default_factory=list)
    nick: str | None = None
    joined_at: str = field(default_factory=iso)


@dataclass
class Channel:
    """A guild text channel, a thread (``parent_id`` set) or a DM (``recipient_id`` set)."""

    id: int
    type: int
    name: str | None = None
    guild_id: int | None = None
    parent_id: int | None = None
    owner_id: int | None = None
    recipient_id: int | None = None
    topic: str | None = None
    position: int = 0
    last_message_id: int | None = None
    message_count: int = 0

    @property
    def is_thread(self) -> bool:
        return self.type in THREAD_TYPES


@dataclass
class Guild:
    id: int
    name: str
    owner_id: int
    roles: dict[int, Role] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    channel_ids: list[int] = field(default_factory=list)  # text channels and threads, in creation order
    joined_at: str = field(default_factory=iso)


class World:
    """Users, guilds and channels of the fake, by id. The caller holds the state lock."""

    def __init__(self) -> None:
        self.users: dict[int, User] = {}
        self.guilds: dict[int, Guild] = {}
        self.channels: dict[int, Channel] = {}
        self.dm_channels: dict[int, int] = {}  # user id -> DM channel id

    # --- payloads ---------------------------------------------------------------------------------

    def user_api(self, user_id: int) -> dict[str, Any]:
        return self.users[user_id].api()

    def member_api(self, guild_id: int, user_id: int, *, with_user: bool = True) -> dict[str, Any]:
        member = self.guilds[guild_id].members[user_id]
        out: dict[str, Any] = {
            "roles": [str(r) for r in member.roles],
            "nick": member.nick,
            "avatar": None,
            "banner": None,
            "joined_at": member.joined_at,
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "communication_disabled_until": None,
        }
        if with_user:
            out["user"] = self.user_api(user_id)
        return out

    def member_permissions(self, guild_id: int, user_id: int) -> int:
        guild = self.guilds[guild_id]
        if user_id == guild.owner_id:
            return (1 << 53) - 1
        bits = guild.roles[guild_id].permissions
        member = guild.members.get(user_id)
        for role_id in member.roles if member else []:
            bits |= guild.roles[role_id].permissions
        return bits

    def channel_api(self, channel_id: int, *, me: int | None = None) -> dict[str, Any]:
        channel = self.channels[channel_id]
        if channel.type == DM:
            assert channel.recipient_id is not None
            return {
                "id": str(channel.id),
                "type": DM,
                "last_message_id": _str_or_none(channel.last_message_id),
                "flags": 0,
                "recipients": [self.user_api(channel.recipient_id)],
            }
        out: dict[str, Any] = {
            "id": str(channel.id),
            "type": channel.type,
            "guild_id": str(channel.guild_id),
            "name": channel.name,
            "parent_id": _str_or_none(channel.parent_id),
            "last_message_id": _str_or_none(channel.last_message_id),
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        if channel.is_thread:
            out.update(
                owner_id=str(channel.owner_id),
                message_count=channel.message_count,
                total_message_sent=channel.message_count,
                member_count=2,
                thread_metadata={
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": snowflake_time(channel.id),
                    "locked": False,
                    "create_timestamp": snowflake_time(channel.id),
                    **({"invitable": True} if channel.type == PRIVATE_THREAD else {}),
                },
            )
            if me is not None:
                out["member"] = {
                    "id": str(channel.id),
                    "user_id": str(me),
                    "join_timestamp": snowflake_time(channel.id),
                    "flags": 0,
                }
        else:
            out.update(position=channel.position, permission_overwrites=[], topic=channel.topic, nsfw=False)
        return out

    def guild_create_api(self, guild_id: int, *, me: int) -> dict[str, Any]:
        """The full ``GUILD_CREATE`` payload of an available guild (``unavailable: false``)."""
        guild = self.guilds[guild_id]
        channels, threads = [], []
        for channel_id in guild.channel_ids:
            payload = self.channel_api(channel_id, me=me)
            if self.channels[channel_id].is_thread:
                threads.append(payload)
            else:
                payload.pop("guild_id", None)  # GUILD_CREATE channels come without it
                channels.append(payload)
        first_text = next((c for c in guild.channel_ids if self.channels[c].type == GUILD_TEXT), None)
        return {
            "id": str(guild.id),
            "name": guild.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(guild.owner_id),
            "region": None,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "nsfw": False,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "system_channel_id": _str_or_none(first_text),
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "vanity_url_code": None,
            "application_id": None,
            "features": [],
            "max_members": 500000,
            "max_video_channel_users": 25,
            "roles": [role.api() for role in guild.roles.values()],
            "emojis": [],
            "stickers": [],
            "soundboard_sounds": [],
            "joined_at": guild.joined_at,
            "large": False,
            "lazy": True,
            "unavailable": False,
            "member_count": len(guild.members),
            "members": [self.member_api(guild.id, uid) for uid in guild.members],
            "voice_states": [],
            "presences": [],
            "channels": channels,
            "threads": threads,
            "stage_instances": [],
            "guild_scheduled_events": [],
        }


def _str_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)
