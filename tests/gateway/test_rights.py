"""The pure rules of ``gateway.rights``: which tools of a frozen list a person may still use, and the one
line a chat gets when its session is replaced. The gateway's end-to-end cases are in
tests/gateway/test_access_gateway.py."""

from __future__ import annotations

from typing import Any

from agent.memory import OWNER_SCOPE, user_scope
from agent.settings import McpSettings
from agent.tools.builtin import builtin_registry
from gateway.config import HeraldConfig
from gateway.conversation.turns import why_replaced
from gateway.rights import ToolRights, refusal, taken_away

FIXED = builtin_registry().fixed


def rights(toolsets: list[str], **servers: dict[str, Any]) -> ToolRights:
    return ToolRights(frozenset(toolsets), McpSettings.model_validate({"servers": servers}))


def server(**settings: Any) -> dict[str, Any]:
    return {"command": "mcp-files", **settings}


def test_a_tool_is_refused_when_its_tool_set_its_mcp_server_or_the_servers_filters_disallow_it() -> None:
    everything = rights(["memory", "todo", "mcp"], files=server(deny=["delete"]), off=server(enabled=False))
    assert refusal("todo", everything, FIXED) is None
    assert refusal("files__read", everything, FIXED) is None
    assert refusal("todo", rights(["memory"]), FIXED) == (
        "The tool 'todo' may no longer be used here: the owner has taken its tool set 'todo' away."
    )
    assert refusal("files__read", rights(["todo"], files=server()), FIXED) == (
        "The tool 'files__read' may no longer be used here: the owner has taken its tool set 'mcp' away."
    )
    assert refusal("gone__read", everything, FIXED) == (
        "The tool 'gone__read' may no longer be used: the MCP server 'gone' was removed from the "
        "configuration."
    )
    assert refusal("off__read", everything, FIXED) == (
        "The tool 'off__read' may no longer be used: the MCP server 'off' is turned off in the configuration."
    )
    assert refusal("files__delete", everything, FIXED) == (
        "The tool 'files__delete' may no longer be used: the configuration no longer allows it for the "
        "MCP server 'files'."
    )
    only_read = rights(["mcp"], files=server(allow=["read"]))
    assert refusal("files__read", only_read, FIXED) is None
    assert refusal("files__write", only_read, FIXED) is not None


def test_a_name_that_is_no_tool_at_all_is_left_to_the_unknown_tool_answer() -> None:
    nothing = rights([])
    assert refusal("web_search", nothing, lambda name: None) is None  # not there now: not a right taken
    assert refusal("made_up", nothing, FIXED) is None


def test_what_a_frozen_list_has_beyond_a_guests_rights_now() -> None:
    config = HeraldConfig.model_validate({"gateway": {"tools_for_guests": ["memory", "todo"]}})
    listed = ["delegate", "memory", "session_search", "todo", "files__read"]
    assert taken_away(listed, ToolRights.of(config, user_scope("telegram", "7")), FIXED) == [
        "delegate", "files__read", "session_search"
    ]  # fmt: skip
    assert taken_away(listed, ToolRights.of(config, OWNER_SCOPE), FIXED) == ["files__read"]  # no server


def test_a_replaced_session_is_explained_in_one_line_and_a_kept_one_says_nothing() -> None:
    guest = user_scope("telegram", "7")
    assert why_replaced(guest, guest, []) is None
    assert why_replaced(OWNER_SCOPE, guest, []) == (
        "New session: your access changed (you are no longer one of the bot's admins here)."
    )
    assert why_replaced(guest, OWNER_SCOPE, []) == (
        "New session: you are one of the bot's admins now, so this chat has the owner's memory."
    )
    assert why_replaced(guest, guest, ["files__read", "web_fetch"]) == (
        "New session: tools this chat had are no longer allowed here (files__read, web_fetch)."
    )
