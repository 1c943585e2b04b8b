"""One console for several bots (``bots:``): each bot's pages under ``/console/bots/NAME``, a switcher on
every page, and each bot's spend side by side on the overview.

Each bot's pages are a :class:`~gateway.console.pages.ConsolePages` of its own, on its own services and
database, so a page cannot show another bot's chats by a query that forgot a filter. The routes of every
bot are one table here: a login made by one bot's link (``gateway.console.auth``) is refused the other
bots' pages (403), a name that is no bot's is a 404 page that says which bots there are, and ``/console/``
and every other page's path without a bot (``/console/chats``: a bookmark from before ``bots:``, or a
path typed by hand) lead to that page of the first bot the login sees, whose switcher offers the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web

from gateway.console.auth import Login
from gateway.console.server import PREFIX, ConsoleWeb, Handler
from gateway.console.sources import BudgetSource, ScopeBudget

BOTS_PATH = "/bots"
SWITCH_TO = {"/chat": "/chats"}  # a page of one chat has no counterpart on another bot: its list has


def bot_base(bot: str) -> str:
    """Where bot ``bot``'s pages start."""
    return f"{PREFIX}{BOTS_PATH}/{bot}"


@dataclass(frozen=True)
class BotSpend:
    """One bot's line on the overview: what it spent today and this month, against its own limits."""

    name: str
    base: str
    spend: ScopeBudget


class Fleet:
    """The bots one console serves, in config order, each with what the console reads of its spending."""

    def __init__(self, budgets: Mapping[str, BudgetSource]) -> None:
        self.budgets = budgets

    @property
    def names(self) -> Sequence[str]:
        return list(self.budgets)

    def seen(self, login: Login | None) -> list[str]:
        """The bots ``login`` may see (one bot's link: that bot)."""
        return [name for name in self.budgets if login is not None and login.sees(name)]

    def switcher(
        self, current: str, request: web.Request, login: Login | None
    ) -> list[tuple[str, str, bool]]:
        """(bot, its counterpart of the page shown, whether it is the current bot) for each bot the login
        sees."""
        section = request.path.removeprefix(bot_base(current)) or "/"
        section = SWITCH_TO.get(section, section) if request.method == "GET" else "/"
        return [(name, bot_base(name) + section, name == current) for name in self.seen(login)]

    async def spend(self, login: Login | None) -> list[BotSpend]:
        """Each bot's spending today and this month (the bots the login sees), in config order."""
        return [
            BotSpend(name, bot_base(name), await self.budgets[name].bot_spend()) for name in self.seen(login)
        ]


def fleet_routes(
    console: ConsoleWeb, fleet: Fleet, pages: Mapping[str, Mapping[str, tuple[str, Handler]]]
) -> dict[str, tuple[str, Handler]]:
    """The console's routes with bots: each bot's ``pages`` (path: (method, handler)) under its base,
    refused to a login of another bot; a page's path without a bot (``/``, ``/chats``...) to that page of
    the first bot the login sees; 404 pages for the rest."""
    routes: dict[str, tuple[str, Handler]] = {}
    for bot, own in pages.items():
        for path, (method, handler) in own.items():
            routes[f"{BOTS_PATH}/{bot}{path}"] = (method, _for_bot(console, bot, handler))

    async def first(request: web.Request) -> web.StreamResponse:
        seen = fleet.seen(console.logged_in(request))
        page = request.path_qs.removeprefix(PREFIX)  # with its query (/chat?key=...)
        raise web.HTTPSeeOther(bot_base(seen[0] if seen else fleet.names[0]) + page)

    async def missing(request: web.Request) -> web.StreamResponse:
        name = request.match_info["bot"]
        if name not in fleet.names:
            text = f"There is no bot called {name}; the bots are {', '.join(fleet.names)}."
            return console.message(request, "No such bot", text, status=404)
        if "rest" not in request.match_info and request.method == "GET":
            raise web.HTTPSeeOther(bot_base(name) + "/")
        return console.message(request, "No such page", f"Bot {name} has no page {request.path}.", status=404)

    for own in pages.values():
        routes.update({path: ("GET", first) for path, (method, _) in own.items() if method == "GET"})
    routes[BOTS_PATH + "/{bot}"] = ("*", missing)
    routes[BOTS_PATH + "/{bot}/{rest:.*}"] = ("*", missing)
    return routes


def _for_bot(console: ConsoleWeb, bot: str, handler: Handler) -> Handler:
    """``handler``, refused (403, nothing done) to a login made by another bot's link."""

    async def handle(request: web.Request) -> web.StreamResponse:
        login = console.logged_in(request)
        if login is not None and not login.sees(bot):
            text = f"This login is for bot {login.bot}; send /console to bot {bot} for a login of its own."
            return console.message(request, "Another bot's page", text, status=403)
        return await handler(request)

    return handle
