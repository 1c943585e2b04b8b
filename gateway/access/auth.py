"""Who may talk to the bot: admins, per-platform allowlists, approved pairings, or everyone.

Nobody who is not allowed gets anything, and costs nothing: the router asks here before a message is
stored or reaches a provider (docs/ARCHITECTURE.md, reliability invariant 4). The same question is asked
again later, about the same :class:`Speaker`, wherever a right could have been taken away since: before
each tool call (``gateway.rights``) and before each run of a job they made (``gateway.cron.standing``).
The configured part is what the process started with; approvals are read from the database each time,
so ``herald pairing revoke`` in another process takes effect at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from adapters.base import ChatType, InboundMessage
from adapters.registry import PLATFORMS
from adapters.spec import AccessRules
from gateway.access.pairing import Pairing
from gateway.chats import API, person_id, split_person_id
from gateway.config import HeraldConfig


@dataclass(frozen=True)
class Speaker:
    """A person where they talk to the bot: what deciding whether they may do so needs."""

    platform: str
    user_id: str
    chat_id: str
    chat_type: ChatType
    server_id: str | None = None  # the server (a guild, a workspace) of a shared chat
    parent_chat_id: str | None = None  # the channel of a thread

    @property
    def person(self) -> str:
        """``platform:user_id``, as ``gateway.admins`` names people."""
        return person_id(self.platform, self.user_id)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Speaker:
        data = json.loads(text)
        return cls(**{**data, "chat_type": ChatType(data["chat_type"])})


def speaker_of(message: InboundMessage) -> Speaker:
    return Speaker(
        platform=message.platform,
        user_id=message.user_id,
        chat_id=message.chat_id,
        chat_type=message.chat_type,
        server_id=message.server_id,
        parent_chat_id=message.parent_chat_id,
    )


@dataclass(frozen=True)
class AccessPolicy:
    """The configured part: ``gateway.admins``, ``gateway.allow_all``, each platform's allowlists."""

    admins: frozenset[str] = frozenset()  # "platform:user_id"
    allow_all: bool = False
    platforms: Mapping[str, AccessRules] = field(default_factory=dict)  # by platform name

    def require_mention(self) -> dict[str, bool]:
        """Per platform, whether shared chats need the bot addressed (the router's rule)."""
        return {name: rules.require_mention for name, rules in self.platforms.items()}


def api_people(config: HeraldConfig) -> frozenset[str]:
    """The user ids of ``api:NAME`` people (``api.keys``): their key is their access (the allowlist of
    the platform ``api``)."""
    people = (split_person_id(key.person) for key in config.api.keys)
    return frozenset(user_id for platform, user_id in people if platform == API)


def access_policy(config: HeraldConfig, *, owners: Sequence[str] = ()) -> AccessPolicy:
    """Who may talk: the config's admins and each platform's rules (its spec reads them from its
    section), plus ``owners`` (the terminal's user)."""
    return AccessPolicy(
        admins=frozenset([*config.gateway.admins, *owners]),
        allow_all=config.gateway.allow_all,
        platforms={
            **{spec.name: spec.access(config.platform_settings(spec)) for spec in PLATFORMS},
            API: AccessRules(users=api_people(config)),  # an api:NAME key is its access
        },
    )


class Authorizer:
    def __init__(self, policy: AccessPolicy, pairing: Pairing) -> None:
        self.policy = policy
        self.pairing = pairing

    @staticmethod
    def _shared_chat_allowed(speaker: Speaker, access: AccessRules) -> bool:
        """Everyone may talk in an allowed chat (a thread follows its channel) or server."""
        chats = {speaker.chat_id, speaker.parent_chat_id} - {None}
        return bool(chats & access.chats) or (
            speaker.server_id is not None and speaker.server_id in access.servers
        )

    def is_admin(self, platform: str, user_id: str) -> bool:
        return person_id(platform, user_id) in self.policy.admins

    async def is_allowed(self, speaker: Speaker) -> bool:
        """Whether ``speaker`` may use the bot where they write (approvals as the database has them now)."""
        if self.policy.allow_all or self.is_admin(speaker.platform, speaker.user_id):
            return True
        access = self.policy.platforms.get(speaker.platform, AccessRules())
        if speaker.user_id in access.users:
            return True
        if speaker.chat_type is not ChatType.DIRECT and self._shared_chat_allowed(speaker, access):
            return True
        return await self.pairing.is_approved(speaker.platform, speaker.user_id)
