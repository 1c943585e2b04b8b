"""Application commands, interaction callbacks and the interaction webhook (followups).

Commands: ``PUT`` overwrites the whole set (global or per guild) and is recorded, so a test can
assert "synced once, not at every start"; a command keeps its id across overwrites, as on Discord.
Interactions: the initial response must come within ``interaction_deadline`` (3 s) and only once
(else 404 10062 "Unknown interaction" / 400 40060 "already acknowledged"); type 4 sends a message,
5 defers ("thinking", flags 128); flags 64 makes it ephemeral (never dispatched on the gateway).
After a deferred response the first followup fills the "thinking" message, as on Discord.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .messages import (
    Upload,
    create_message,
    delete_message,
    dispatch_create,
    edit_message,
    message_api,
    store,
)
from .records import EPHEMERAL, LOADING, InteractionRecord, InteractionResponse, StoredMessage
from .rest import RestRequest, Result, Route
from .state import DiscordState
from .wire import (
    ALREADY_ACKNOWLEDGED,
    MISSING_ACCESS,
    UNKNOWN_APPLICATION_COMMAND,
    UNKNOWN_INTERACTION,
    UNKNOWN_MESSAGE,
    UNKNOWN_WEBHOOK,
    ApiError,
    form_error,
    iso,
    not_found,
    too_long,
)

CHAT_INPUT = 1
COMMAND_LIMIT = 100
_NAME = re.compile(r"^[-_'\w]{1,32}$")
CHAT_INPUT_COMMAND_MESSAGE = 20  # message type of an interaction response
CALLBACK_TYPES = {
    1: "pong",
    4: "message",
    5: "deferred",
    6: "deferred_update",
    7: "update",
    8: "autocomplete",
    9: "modal",
}


# --- application commands ----------------------------------------------------------------------


def _scope(state: DiscordState, req: RestRequest) -> int | None:
    if req.params.get("application_id") != str(state.application_id):
        raise ApiError(403, MISSING_ACCESS)
    guild = req.params.get("guild_id")
    if guild is None:
        return None
    if not guild.isdigit() or int(guild) not in state.world.guilds:
        raise ApiError(403, MISSING_ACCESS)
    return int(guild)


def _validate_command(index: str, command: Any) -> dict[str, Any]:
    if not isinstance(command, dict):
        raise form_error(index, "DICT_TYPE_CONVERT", "Only dictionaries may be used in a DictType")
    kind = int(command.get("type") or CHAT_INPUT)
    name = command.get("name")
    if (
        not isinstance(name, str)
        or not _NAME.fullmatch(name)
        or (kind == CHAT_INPUT and name != name.lower())
    ):
        raise form_error(f"{index}.name", "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")
    description = command.get("description") or ""
    if kind == CHAT_INPUT and not 1 <= len(description) <= 100:
        raise form_error(
            f"{index}.description", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
        )
    options = command.get("options") or []
    if len(options) > 25:
        raise too_long(f"{index}.options", 25)
    return command


def _command_object(state: DiscordState, scope: int | None, command: dict[str, Any]) -> dict[str, Any]:
    kind = int(command.get("type") or CHAT_INPUT)
    key = (scope, command["name"], kind)
    command_id = state.command_ids.setdefault(key, state.snowflakes.next())
    out = {
        "default_member_permissions": None,
        "nsfw": False,
        "name_localizations": None,
        "description_localizations": None,
        "contexts": None,
        "integration_types": [0],
        **command,
        "id": str(command_id),
        "application_id": str(state.application_id),
        "version": str(state.snowflakes.next()),
        "type": kind,
        "description": command.get("description") or "",
    }
    if scope is not None:
        out["guild_id"] = str(scope)
    return out


def get_commands(state: DiscordState, req: RestRequest) -> Result:
    return 200, state.commands(_scope(state, req))


def put_commands(state: DiscordState, req: RestRequest) -> Result:
    scope = _scope(state, req)
    raw = req.json if req.json is not None else []
    if not isinstance(raw, list):
        raise form_error("_root", "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType")
    if len(raw) > COMMAND_LIMIT:
        raise too_long("_root", COMMAND_LIMIT)
    commands = [_validate_command(str(i), c) for i, c in enumerate(raw)]
    names = [(c["name"], int(c.get("type") or CHAT_INPUT)) for c in commands]
    if len(set(names)) != len(names):
        raise form_error(
            "_root", "APPLICATION_COMMANDS_DUPLICATE_NAME", "Application command names must be unique"
        )
    state.record_sync(scope, commands)
    state.registered_commands[scope] = [_command_object(state, scope, c) for c in commands]
    return 200, state.commands(scope)


def post_command(state: DiscordState, req: RestRequest) -> Result:
    scope = _scope(state, req)
    command = _validate_command("_root", req.body())
    obj = _command_object(state, scope, command)
    current = [c for c in state.registered_commands.get(scope, []) if c["id"] != obj["id"]]
    state.registered_commands[scope] = [*current, obj]
    return 201, obj


def delete_command(state: DiscordState, req: RestRequest) -> Result:
    scope = _scope(state, req)
    current = state.registered_commands.get(scope, [])
    remaining = [c for c in current if c["id"] != req.params["command_id"]]
    if len(remaining) == len(current):
        raise not_found(UNKNOWN_APPLICATION_COMMAND)
    state.registered_commands[scope] = remaining
    return 204, None


# --- interaction callback ----------------------------------------------------------------------


def _record(
    state: DiscordState,
    interaction_id: int,
    kind: str,
    type_: int | None,
    data: dict[str, Any],
    status: int,
    message_id: int | None = None,
    error: str | None = None,
) -> None:
    state.record_response(
        InteractionResponse(interaction_id, kind, type_, data, status, time.monotonic(), message_id, error)
    )


def callback(state: DiscordState, req: RestRequest) -> Result:
    raw_id = req.params["interaction_id"]
    interaction = state.interactions.get(int(raw_id)) if raw_id.isdigit() else None
    body = req.body()
    type_ = body.get("type")
    raw_data = body.get("data")
    data: dict[str, Any] = raw_data if isinstance(raw_data, dict) else {}
    if interaction is None or interaction.token != req.params["token"]:
        raise not_found(UNKNOWN_INTERACTION)
    result: dict[str, Any] | None
    try:
        status, result, message_id = _answer(state, interaction, type_, data, req.uploads)
    except ApiError as exc:
        _record(state, interaction.id, "callback", type_, data, exc.status, error=exc.message)
        raise
    if req.query.get("with_response") not in ("1", "true", "True"):
        status, result = 204, None  # no body unless asked for (discord.py 2.7 always asks)
    _record(state, interaction.id, "callback", type_, data, status, message_id)
    return status, result


def _answer(
    state: DiscordState,
    interaction: InteractionRecord,
    type_: Any,
    data: dict[str, Any],
    uploads: list[Upload],
) -> tuple[int, dict[str, Any], int | None]:
    if interaction.callback_type is not None:
        raise ApiError(400, ALREADY_ACKNOWLEDGED)
    if time.monotonic() - interaction.created > state.interaction_deadline:
        raise not_found(UNKNOWN_INTERACTION)
    if type_ not in CALLBACK_TYPES:
        raise form_error("type", "BASE_TYPE_CHOICES", f"Value must be one of {sorted(CALLBACK_TYPES)}.")
    if interaction.type == 2 and type_ in (1, 6, 7):
        raise ApiError(400, 40043, "Interaction response type is not valid for this interaction")
    msg: StoredMessage | None = None
    flags = int(data.get("flags") or 0)
    if type_ == 4:
        msg = create_message(
            state,
            interaction.channel_id,
            data,
            uploads,
            author_id=state.bot_id,
            msg_type=CHAT_INPUT_COMMAND_MESSAGE,
            interaction_id=interaction.id,
            webhook_id=state.application_id,
        )
    elif type_ == 5:
        msg = _thinking(state, interaction, flags & EPHEMERAL)
    interaction.callback_type = int(type_)
    if msg is not None:
        interaction.original_message_id = msg.id
    result: dict[str, Any] = {
        "interaction": {
            "id": str(interaction.id),
            "type": interaction.type,
            "response_message_loading": type_ == 5,
            "response_message_ephemeral": bool(msg is not None and msg.flags & EPHEMERAL),
        }
    }
    resource: dict[str, Any] = {"type": type_}
    if msg is not None:
        result["interaction"]["response_message_id"] = str(msg.id)
        resource["message"] = message_api(state, msg)
    result["resource"] = resource
    return 200, result, None if msg is None else msg.id


def _thinking(state: DiscordState, interaction: InteractionRecord, ephemeral: int) -> StoredMessage:
    msg = StoredMessage(
        id=state.snowflakes.next(),
        channel_id=interaction.channel_id,
        guild_id=interaction.guild_id,
        author_id=state.bot_id,
        content="",
        timestamp=iso(),
        type=CHAT_INPUT_COMMAND_MESSAGE,
        flags=LOADING | ephemeral,
        interaction_id=interaction.id,
        webhook_id=state.application_id,
        versions=[""],
    )
    store(state, msg)
    dispatch_create(state, msg)
    return msg


# --- interaction webhook: original response and followups ---------------------------------------


def _by_token(state: DiscordState, req: RestRequest) -> InteractionRecord:
    if req.params.get("application_id") != str(state.application_id):
        raise not_found(UNKNOWN_WEBHOOK)
    token = req.params["token"]
    found = next((i for i in state.interactions.values() if i.token == token), None)
    if found is None:
        raise not_found(UNKNOWN_WEBHOOK)
    return found


def _webhook_message(state: DiscordState, interaction: InteractionRecord, raw_id: str) -> StoredMessage:
    if raw_id == "@original":
        message_id = interaction.original_message_id
    else:
        message_id = int(raw_id) if raw_id.isdigit() else None
        if message_id not in interaction.followup_ids and message_id != interaction.original_message_id:
            message_id = None
    msg = state.messages_by_id.get(message_id) if message_id is not None else None
    if msg is None or msg.deleted:
        raise not_found(UNKNOWN_MESSAGE)
    return msg


def _kind(raw_id: str, verb: str) -> str:
    return f"{verb}_original" if raw_id == "@original" else f"{verb}_followup"


def get_webhook_message(state: DiscordState, req: RestRequest) -> Result:
    interaction = _by_token(state, req)
    return 200, message_api(state, _webhook_message(state, interaction, req.params["message_id"]))


def patch_webhook_message(state: DiscordState, req: RestRequest) -> Result:
    interaction = _by_token(state, req)
    raw_id, body = req.params["message_id"], req.body()
    try:
        msg = _webhook_message(state, interaction, raw_id)
        edit_message(state, msg, body, req.uploads)
    except ApiError as exc:
        _record(state, interaction.id, _kind(raw_id, "edit"), None, body, exc.status, error=exc.message)
        raise
    _record(state, interaction.id, _kind(raw_id, "edit"), None, body, 200, msg.id)
    return 200, message_api(state, msg)


def delete_webhook_message(state: DiscordState, req: RestRequest) -> Result:
    interaction = _by_token(state, req)
    raw_id = req.params["message_id"]
    msg = _webhook_message(state, interaction, raw_id)
    delete_message(state, msg)
    _record(state, interaction.id, _kind(raw_id, "delete"), None, {}, 204, msg.id)
    return 204, None


def post_followup(state: DiscordState, req: RestRequest) -> Result:
    interaction = _by_token(state, req)
    body = req.body()
    wait = req.query.get("wait") in ("1", "true", "True")
    try:
        if interaction.callback_type is None:
            raise not_found(UNKNOWN_WEBHOOK)
        original = state.messages_by_id.get(interaction.original_message_id or 0)
        if original is not None and original.flags & LOADING and not original.deleted:
            # The first followup after a deferred response fills the "thinking" message (keeping
            # the ephemeral choice made when deferring); later followups are new messages.
            msg = edit_message(state, original, body, req.uploads)
        else:
            msg = create_message(
                state,
                interaction.channel_id,
                body,
                req.uploads,
                author_id=state.bot_id,
                msg_type=CHAT_INPUT_COMMAND_MESSAGE,
                interaction_id=interaction.id,
                webhook_id=state.application_id,
            )
            interaction.followup_ids.append(msg.id)
    except ApiError as exc:
        _record(state, interaction.id, "followup", None, body, exc.status, error=exc.message)
        raise
    _record(state, interaction.id, "followup", None, body, 200 if wait else 204, msg.id)
    return (200, message_api(state, msg)) if wait else (204, None)


ROUTES: list[Route] = [
    Route("GET", "/applications/{application_id}/commands", get_commands),
    Route("PUT", "/applications/{application_id}/commands", put_commands),
    Route("POST", "/applications/{application_id}/commands", post_command),
    Route("DELETE", "/applications/{application_id}/commands/{command_id}", delete_command),
    Route("GET", "/applications/{application_id}/guilds/{guild_id}/commands", get_commands),
    Route("PUT", "/applications/{application_id}/guilds/{guild_id}/commands", put_commands),
    Route("POST", "/applications/{application_id}/guilds/{guild_id}/commands", post_command),
    Route("DELETE", "/applications/{application_id}/guilds/{guild_id}/commands/{command_id}", delete_command),
    Route("POST", "/interactions/{interaction_id}/{token}/callback", callback, auth=False),
    Route("POST", "/webhooks/{application_id}/{token}", post_followup, auth=False),
    Route("GET", "/webhooks/{application_id}/{token}/messages/{message_id}", get_webhook_message, auth=False),
    Route(
        "PATCH", "/webhooks/{application_id}/{token}/messages/{message_id}", patch_webhook_message, auth=False
    ),
    Route(
        "DELETE",
        "/webhooks/{application_id}/{token}/messages/{message_id}",
        delete_webhook_message,
        auth=False,
    ),
]
