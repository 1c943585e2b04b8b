"""Who may talk to the bot: admins, per-platform allowlists, approved pairings, or everyone.

Nobody who is not allowed gets anything, and costs nothing: the router asks here before a message is
stored or reaches a provider (ARCHITECTURE.md, reliability invariant 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from adapters.base import ChatType, InboundMessage
from gateway.access.pairing import Pairing
from gateway.conversation.addressing import admin_id


@dataclass(frozen=True)
class PlatformAccess:
    """One platform's allowlists: people, and chats or servers where everyone may talk to the bot."""

    users: frozenset[str] = frozenset()
    chats: frozenset[str] = frozenset()  # e.g. Discord channels (shared chats only, never DMs)
    servers: frozenset[str] = frozenset()  # e.g. Discord guilds (shared chats only)


@dataclass(frozen=True)
class AccessPolicy:
    """The configured part: ``gateway.admins``, ``gateway.allow_all``, each platform's allowlists."""

    admins: frozenset[str] = frozenset()  # "platform:user_id"
    allow_all: bool = False
    platforms: Mapping[str, PlatformAccess] = field(default_factory=dict)


class Authorizer:
    def __init__(self, policy: AccessPolicy, pairing: Pairing) -> None:
        self.policy = policy
        self.pairing = pairing

    @staticmethod
    def _shared_chat_allowed(message: InboundMessage, access: PlatformAccess) -> bool:
        """Everyone may talk in an allowed chat (a thread follows its channel) or server."""
        chats = {message.chat_id, message.parent_chat_id} - {None}
        return bool(chats & access.chats) or (
            message.server_id is not None and message.server_id in access.servers
        )

    def is_admin(self, platform: str, user_id: str) -> bool:
        return admin_id(platform, user_id) in self.policy.admins

    async def is_allowed(self, message: InboundMessage) -> bool:
        """Whether ``message``'s author may use the bot where they wrote it."""
        if self.policy.allow_all or self.is_admin(message.platform, message.user_id):
            return True
        access = self.policy.platforms.get(message.platform, PlatformAccess())
        if message.user_id in access.users:
            return True
        if message.chat_type is not ChatType.DIRECT and self._shared_chat_allowed(message, access):
            return True
        return await self.pairing.is_approved(message.platform, message.user_id)
