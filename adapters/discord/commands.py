"""Slash commands on the wire: the gateway's neutral command table as Discord application commands,
and an invoked command back as the text ``/name args`` the gateway's command parser reads.

The neutral :class:`CommandSpec` has a name and a description, not a parameter list, while Herald's
commands take free-text arguments (``/model NAME``, ``/approve CODE``). So every command gets one
optional string option, :data:`ARGS_OPTION`, and whatever the person types there follows the name:
``/model args:gpt-5`` arrives as ``/model gpt-5``. Discord's limits are applied here (names
lowercase ``[-_a-z0-9]{1,32}``, descriptions 1–100 characters); a name Discord would refuse is left
out with a warning rather than failing the whole table.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.base import CommandSpec

log = logging.getLogger(__name__)

CHAT_INPUT = 1  # application command type of slash commands
SUB_COMMAND, SUB_COMMAND_GROUP, STRING = 1, 2, 3  # option types
ARGS_OPTION = "args"
MAX_COMMANDS = 100
MAX_DESCRIPTION = 100
_NAME = re.compile(r"^[-_a-z0-9]{1,32}$")


def command_payload(commands: Sequence[CommandSpec]) -> list[dict[str, Any]]:
    """The JSON body of one bulk overwrite (``PUT /applications/{id}/commands``)."""
    payload: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in commands:
        if not _NAME.fullmatch(spec.name) or spec.name in seen:
            log.warning("Leaving /%s out of the Discord commands: not a valid, unique name", spec.name)
            continue
        if len(payload) == MAX_COMMANDS:
            log.warning("Discord takes %d commands at most; /%s on are left out", len(payload), spec.name)
            break
        seen.add(spec.name)
        payload.append(
            {
                "type": CHAT_INPUT,
                "name": spec.name,
                "description": _description(spec),
                "options": [
                    {
                        "type": STRING,
                        "name": ARGS_OPTION,
                        "description": "arguments, if the command takes any",
                        "required": False,
                    }
                ],
            }
        )
    return payload


def command_text(data: Mapping[str, Any]) -> str:
    """``/name`` followed by subcommand names and option values in order, space-separated.

    ``{"name": "model", "options": [{"name": "args", "value": "gpt-5"}]}`` → ``/model gpt-5``;
    subcommands (not registered by Herald, but possible) read as words: ``/memory forget pets``.
    """
    words = [f"/{data.get('name', '')}"]
    words.extend(_option_words(data.get("options")))
    return " ".join(word for word in words if word).strip()


def command_name(text: str) -> str:
    """The command's name in a :func:`command_text` (``/model gpt-5`` → ``model``)."""
    return text.removeprefix("/").partition(" ")[0]


def _option_words(options: Any) -> list[str]:
    words: list[str] = []
    for option in options if isinstance(options, list) else []:
        if not isinstance(option, Mapping):
            continue
        if option.get("type") in (SUB_COMMAND, SUB_COMMAND_GROUP):
            words.append(str(option.get("name", "")))
            words.extend(_option_words(option.get("options")))
        elif option.get("value") is not None:
            words.append(str(option["value"]).strip())
    return words


def _description(spec: CommandSpec) -> str:
    text = " ".join(spec.description.split()) or spec.name
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return text
