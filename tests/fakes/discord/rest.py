"""REST routes for users, the application, the gateway URL, channels and messages.

Each handler takes the state (lock held by the caller) and a parsed :class:`RestRequest`, and
returns ``(status, body)`` (body None: 204 without content) or raises :class:`ApiError`. The route
table (:data:`ROUTES`, extended by :mod:`.interactions`) is matched in order, so ``/users/@me``
wins over ``/users/{user_id}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .messages import Upload, create_message, delete_message, edit_message, message_api
from .records import EPHEMERAL
from .state import DiscordState
from .wire import (
    CANNOT_EDIT_OTHERS,
    MISSING_ACCESS,
    UNKNOWN_CHANNEL,
    UNKNOWN_MESSAGE,
    UNKNOWN_USER,
    ApiError,
    form_error,
    not_found,
)
from .world import DM, Channel

Result = tuple[int, Any]


@dataclass
class RestRequest:
    method: str
    path: str  # relative to /api/v10
    params: dict[str, str]  # from the route template
    query: dict[str, str]
    json: Any
    uploads: list[Upload] = field(default_factory=list)

    def int_param(self, name: str) -> int:
        return int(self.params[name])

    def body(self) -> dict[str, Any]:
        if self.json is None:
            return {}
        if not isinstance(self.json, dict):
            raise ApiError(400, 50109, "The request body contains invalid JSON.")
        return self.json


Handler = Callable[[DiscordState, RestRequest], Result]


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    handler: Handler
    auth: bool = True  # interaction callbacks and webhooks authenticate by their token instead

    @property
    def regex(self) -> re.Pattern[str]:
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(self.template))
        return re.compile(pattern)


# --- helpers -----------------------------------------------------------------------------------


def channel_for(state: DiscordState, req: RestRequest) -> Channel:
    """The channel named by the route, after the ``forbid_channel`` check."""
    try:
        channel_id = req.int_param("channel_id")
    except ValueError:
        raise form_error("channel_id", "NUMBER_TYPE_COERCE", "Value is not snowflake.") from None
    channel = state.world.channels.get(channel_id)
    if channel is None:
        raise not_found(UNKNOWN_CHANNEL)
    forbidden = state.forbidden.get(channel_id)
    if forbidden is not None:
        status, code, message = forbidden
        raise ApiError(status, code, message)
    return channel


def message_for(state: DiscordState, channel: Channel, req: RestRequest) -> Any:
    try:
        message_id = req.int_param("message_id")
    except ValueError:
        raise not_found(UNKNOWN_MESSAGE) from None
    msg = state.messages_by_id.get(message_id)
    if msg is None or msg.deleted or msg.channel_id != channel.id or msg.flags & EPHEMERAL:
        raise not_found(UNKNOWN_MESSAGE)
    return msg


# --- users, application, gateway ----------------------------------------------------------------


def get_me(state: DiscordState, req: RestRequest) -> Result:
    me = state.bot_user()
    me.update(verified=True, mfa_enabled=False, flags=0, email=None, locale="en-US", banner=None, bio="")
    return 200, me


def get_user(state: DiscordState, req: RestRequest) -> Result:
    user_id = int(req.params["user_id"]) if req.params["user_id"].isdigit() else -1
    if user_id not in state.world.users:
        raise not_found(UNKNOWN_USER)
    return 200, state.world.user_api(user_id)


def get_application(state: DiscordState, req: RestRequest) -> Result:
    return 200, {
        "id": str(state.application_id),
        "name": state.bot_user()["username"],
        "icon": None,
        "description": "",
        "summary": "",
        "type": None,
        "bot_public": True,
        "bot_require_code_grant": False,
        "verify_key": "0" * 64,
        "flags": state.application_flags(),
        "owner": state.world.user_api(state.owner_id),
        "team": None,
        "bot": state.bot_user(),
        "hook": True,
        "redirect_uris": [],
        "interactions_endpoint_url": None,
        "tags": [],
        "approximate_guild_count": len(state.world.guilds),
        "integration_types_config": {"0": {}},
    }


def get_gateway(state: DiscordState, req: RestRequest) -> Result:
    return 200, {"url": state.gateway_url}


def get_gateway_bot(state: DiscordState, req: RestRequest) -> Result:
    return 200, {
        "url": state.gateway_url,
        "shards": state.recommended_shards,
        "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1},
    }


def create_dm(state: DiscordState, req: RestRequest) -> Result:
    raw = req.body().get("recipient_id")
    if raw is None or not str(raw).isdigit():
        raise form_error("recipient_id", "BASE_TYPE_REQUIRED", "This field is required")
    user_id = int(raw)
    if user_id not in state.world.users:
        raise ApiError(400, UNKNOWN_USER)
    channel_id = state.dm_channel(user_id)
    return 200, state.world.channel_api(channel_id)


# --- channels and messages -----------------------------------------------------------------------


def get_channel(state: DiscordState, req: RestRequest) -> Result:
    channel = channel_for(state, req)
    return 200, state.world.channel_api(channel.id, me=state.bot_id)


def post_message(state: DiscordState, req: RestRequest) -> Result:
    channel = channel_for(state, req)
    if channel.type == DM and channel.recipient_id == state.bot_id:
        raise ApiError(403, MISSING_ACCESS)
    msg = create_message(state, channel.id, req.body(), req.uploads, author_id=state.bot_id)
    return 200, message_api(state, msg)


def get_message(state: DiscordState, req: RestRequest) -> Result:
    channel = channel_for(state, req)
    return 200, message_api(state, message_for(state, channel, req))


def list_messages(state: DiscordState, req: RestRequest) -> Result:
    """``GET /channels/{id}/messages``: newest first; ``limit`` (1..100), ``before``, ``after``."""
    channel = channel_for(state, req)
    try:
        limit = max(1, min(100, int(req.query.get("limit", "50"))))
        before = int(req.query["before"]) if "before" in req.query else None
        after = int(req.query["after"]) if "after" in req.query else None
    except ValueError:
        raise form_error("limit", "NUMBER_TYPE_COERCE", "Value is not int.") from None
    found = [
        m
        for mid, m in sorted(state.messages_by_id.items(), reverse=True)
        if m.channel_id == channel.id
        and not m.deleted
        and not m.flags & EPHEMERAL
        and (before is None or mid < before)
        and (after is None or mid > after)
    ]
    if after is not None and before is None:
        found = list(reversed(found))[:limit][::-1]
    return 200, [message_api(state, m) for m in found[:limit]]


def patch_message(state: DiscordState, req: RestRequest) -> Result:
    channel = channel_for(state, req)
    msg = message_for(state, channel, req)
    if msg.author_id != state.bot_id:
        raise ApiError(403, CANNOT_EDIT_OTHERS)
    edit_message(state, msg, req.body(), req.uploads)
    return 200, message_api(state, msg)


def remove_message(state: DiscordState, req: RestRequest) -> Result:
    channel = channel_for(state, req)
    delete_message(state, message_for(state, channel, req))
    return 204, None


def post_typing(state: DiscordState, req: RestRequest) -> Result:
    channel = channel_for(state, req)
    state.record_typing(channel.id)
    return 204, None


ROUTES: list[Route] = [
    Route("GET", "/users/@me", get_me),
    Route("POST", "/users/@me/channels", create_dm),
    Route("GET", "/users/{user_id}", get_user),
    Route("GET", "/oauth2/applications/@me", get_application),
    Route("GET", "/applications/@me", get_application),
    Route("GET", "/gateway", get_gateway, auth=False),
    Route("GET", "/gateway/bot", get_gateway_bot),
    Route("GET", "/channels/{channel_id}", get_channel),
    Route("GET", "/channels/{channel_id}/messages", list_messages),
    Route("POST", "/channels/{channel_id}/messages", post_message),
    Route("GET", "/channels/{channel_id}/messages/{message_id}", get_message),
    Route("PATCH", "/channels/{channel_id}/messages/{message_id}", patch_message),
    Route("DELETE", "/channels/{channel_id}/messages/{message_id}", remove_message),
    Route("POST", "/channels/{channel_id}/typing", post_typing),
]
