"""Who may talk to the bot: admins, per-platform allowlists, approved pairings, or everyone.

Nobody who is not allowed gets anything, and costs nothing: the router asks here before a message is
stored or reaches a provider (ARCHITECTURE.md, reliability invariant 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.addressing import admin_id
from gateway.pairing import Pairing


@dataclass(frozen=True)
class AccessPolicy:
    """The configured part: ``gateway.admins``, ``gateway.allow_all``, ``<platform>.allowed_users``."""

    admins: frozenset[str] = frozenset()  # "platform:user_id"
    allow_all: bool = False
    allowed_users: Mapping[str, frozenset[str]] = field(default_factory=dict)  # platform -> user ids


class Authorizer:
    def __init__(self, policy: AccessPolicy, pairing: Pairing) -> None:
        self.policy = policy
        self.pairing = pairing

    def is_admin(self, platform: str, user_id: str) -> bool:
        return admin_id(platform, user_id) in self.policy.admins

    async def is_allowed(self, platform: str, user_id: str) -> bool:
        if self.policy.allow_all or self.is_admin(platform, user_id):
            return True
        if user_id in self.policy.allowed_users.get(platform, frozenset()):
            return True
        return await self.pairing.is_approved(platform, user_id)
