"""The App Home tab: what the bot is and how to talk to it, with the gateway's command table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adapters.base import CommandSpec

from .render import escape

SECTION_LIMIT = 3000  # characters in one section block's text


def home_view(bot_name: str, slash_command: str, commands: Sequence[CommandSpec]) -> dict[str, Any]:
    """A ``home`` view for ``views.publish``."""
    how = (
        f"I am *{escape(bot_name)}*, an assistant. Write to me in the *Messages* tab, mention me with "
        f"`@{escape(bot_name)}` in a channel I am in, or in a thread: I answer in the thread and read "
        "what was said there before."
    )
    listed = "\n".join(
        f"`{slash_command} {command.name}`  {escape(command.description)}" for command in commands
    )
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": bot_name[:150] or "Herald"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": how}},
    ]
    if listed:
        blocks.append({"type": "divider"})
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*Commands*\n{listed}"[:SECTION_LIMIT]}}
        )
    return {"type": "home", "blocks": blocks}
