"""Spend limits on the command line: ``herald chat -q`` over a limit, and ``herald budget``."""

from __future__ import annotations

import re

from gateway.config import set_value
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.helpers import point_at
from tests.spend_support import crossing


def test_a_script_over_the_limit_is_told_each_time_and_herald_budget_shows_every_scope(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald
) -> None:
    point_at(home, served)
    for key, value in (
        ("budgets.chat.daily_usd", "0.015"),
        ("budgets.bot.monthly_usd", "50"),
        ("scheduler.timezone", "Europe/Berlin"),
        ("model.max_tokens", "100"),
        ("budgets.exempt_admins", "false"),  # the terminal's user is the owner, exempt by default
    ):
        set_value(home.config_path, key, value)
    outcomes = [herald("chat", "-q", "first")]
    while outcomes[-1].returncode == 0 and len(outcomes) < 20:
        outcomes.append(herald("chat", "-q", f"then {len(outcomes)}", "--continue"))
    asked = len(emulator.requests)
    again = herald("chat", "-q", "and again", "--continue")
    report = herald("budget")

    refused = outcomes[-1]
    assert refused.returncode == 1 and refused.stdout == ""
    told = crossing(refused.stderr.strip())  # the next request would cross the limit
    assert (told["who"], told["limit"], told["when"]) == ("This chat has", "$0.015", "at 00:00 Europe/Berlin")
    assert again.returncode == 1 and crossing(again.stderr.strip())["spent"] == told["spent"]  # every time
    assert len(emulator.requests) == asked == len(outcomes) - 1  # neither reached the model
    assert report.returncode == 0
    lines = report.stdout.splitlines()
    header = r"Spending in USD, today \(\d{4}-\d\d-\d\d\) and this month \(\d{4}-\d\d\), Europe/Berlin:"
    assert re.fullmatch(header, lines[0])
    assert lines[1].split() == ["scope", "today", "this", "month"]
    # a month with a limit says where it is heading: a few cents a day is far within $50
    assert re.match(
        r"the bot +\$0\.0\d+ +\$0\.0\d+ of \$50\.00 \(0%\) +at this pace \$\d\.\d+ this month, within its "
        r"\$50\.00 limit$",
        lines[2],
    )
    assert re.match(r"chat cli:dm:local +\$0\.01\d+ of \$0\.015 \(\d+%\) +\$0\.01\d+$", lines[3])
    assert lines[3].split()[2] == told["spent"]  # the line told what the chat had really spent
    assert re.match(r"person cli:\S+ +\$0\.01\d+ +\$0\.01\d+$", lines[4])
    assert lines[5] == "Limits: the bot $50.00/month; each chat $0.015/day. Admins are warned at 80%."
