"""A scripted model that browses the test site (tests/fakes/site.py) through the browser tools, for the
agent-loop test and ``benchmarks/browser_task.py``.

Like a real model it reads each tool result and takes the next element's ref from the latest snapshot
(the site's refs are not known in advance), so the run goes through the real tools, the real snapshot
text and the real history. Ten steps: sign in, order a book, read a list a script renders.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.emulator import Reply, ToolUse
from tests.fakes.site import PASSWORD


@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, Any]
    ref_of: str | None = None  # the snapshot line whose ref goes into args["ref"] ('textbox "User name"')
    start_from: bool = False  # args["start"]: the next part of a long snapshot, as the last result says


def ten_steps(base: str) -> list[Step]:
    """Sign in, order a hardback, read the sightings: ten browser calls."""
    return [
        Step("browser_navigate", {"url": f"{base}/"}),
        Step("browser_click", {}, 'link "Sign in"'),
        Step("browser_type", {"text": "alice"}, 'textbox "User name"'),
        Step("browser_type", {"text": PASSWORD, "submit": True}, 'textbox "Password"'),
        Step("browser_navigate", {"url": f"{base}/form"}),
        Step("browser_type", {"text": "Alice"}, 'textbox "Your name"'),
        Step("browser_select", {"values": ["Hardback"]}, 'combobox "Edition"'),
        Step("browser_click", {}, 'button "Order"'),
        Step("browser_navigate", {"url": f"{base}/list"}),
        Step("browser_wait_for", {"text": "3 sightings loaded"}),
    ]


def last_tool_text(body: dict[str, Any]) -> str:
    """The text of the last tool result in a request (Anthropic or Chat Completions)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "tool":
            return str(message.get("content"))
        content = message.get("content")
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                inner = results[-1].get("content")
                return inner if isinstance(inner, str) else json.dumps(inner)
    return ""


@dataclass
class BrowsingModel:
    """An emulator responder: the next step of ``steps`` for each request, then ``answer`` once; later
    requests (a compression's summary) get the emulator's default reply."""

    steps: list[Step]
    answer: str = "Done: signed in, ordered the hardback, and 3 sightings are listed."
    taken: int = 0
    results: list[str] = field(default_factory=list)  # the tool result each step was chosen after

    def __call__(self, body: dict[str, Any], api: str) -> Reply | None:
        if self.taken > len(self.steps):
            return None
        text = last_tool_text(body)
        self.results.append(text)
        if self.taken == len(self.steps):
            self.taken += 1
            return Reply(text=self.answer)
        step = self.steps[self.taken]
        args = dict(step.args)
        if step.ref_of is not None:
            found = re.search(rf"- {re.escape(step.ref_of)}[^\n]*?\[ref=([a-z0-9]+)\]", text)
            if found is None:
                self.taken = len(self.steps) + 1
                return Reply(text=f"I cannot find {step.ref_of} on the page.")
            args["ref"] = found.group(1)
        if step.start_from:
            start = re.search(r"browser_snapshot with start=(\d+)", text)
            args["start"] = int(start.group(1)) if start else 1
        self.taken += 1
        return Reply(tool_calls=[ToolUse(step.tool, args)])
