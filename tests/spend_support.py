"""Reading what a chat or a client is told when a spend limit refuses a request."""

from __future__ import annotations

import re

CROSSING = re.compile(
    r"(?P<who>.+) spent (?P<spent>\$[\d.,]+) of (?:its|your) (?P<limit>\$[\d.,]+) (?P<window>for [a-z ]+); "
    r"this request needs at least (?P<needed>\$[\d.,]+), more than the (?P<left>\$[\d.,]+) left, so it "
    r"was not sent\.(?: The limit resets (?P<when>.+)\.)?"
)


def crossing(line: str) -> dict[str, str]:
    """The parts of a refusal of a request that would have crossed a limit (it fails on any other)."""
    found = CROSSING.fullmatch(line)
    assert found is not None, line
    return {key: value for key, value in found.groupdict().items() if value is not None}


def dollars(amount: str) -> float:
    return float(amount.removeprefix("$").replace(",", ""))
