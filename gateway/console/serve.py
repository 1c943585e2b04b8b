"""Whether this gateway process serves the console, and the console built on its services.

The console is served on the gateway's HTTP server (``gateway.http_host``, loopback by default). On an
address other than loopback, someone else on the network could reach its login page: it is served there
only with ``HERALD_CONSOLE_TOKEN`` set, and never with a token too short to resist guessing (a
ConfigError at start, one sentence saying what to set).

With ``bots:`` the one console serves every bot (``gateway.console.bots``): one login (its signing
secret and failed-login count kept by the first bot), each bot's pages on its own services.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config import ConfigError, HeraldConfig
from gateway.console.attempts import LoginAttempts
from gateway.console.auth import Signer, derive_key, weak_token
from gateway.console.bots import Fleet, fleet_routes
from gateway.console.links import LoginLinks
from gateway.console.pages import ConsolePages, ConsoleServices, Readiness
from gateway.console.render import Renderer
from gateway.console.reports import Reports
from gateway.console.server import PREFIX, ConsoleWeb
from gateway.console.sources import BudgetSource, CacheMissSource
from gateway.home.facts import GatewayFacts

if TYPE_CHECKING:
    from gateway.cluster.member import ClusterMember

log = logging.getLogger(__name__)

CONSOLE_TOKEN = "HERALD_CONSOLE_TOKEN"
SECRET_FACT = "console_secret"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def console_token(environ: Mapping[str, str]) -> str | None:
    """``HERALD_CONSOLE_TOKEN``, or None when unset; a ConfigError when it is set but too weak."""
    token = environ.get(CONSOLE_TOKEN, "").strip() or None
    if token is not None and (problem := weak_token(token)):
        raise ConfigError(problem)
    return token


@dataclass(frozen=True)
class ConsoleBot:
    """A bot the console shows: its name (None: the one bot without ``bots:``), its services and this
    process's membership of its cluster."""

    name: str | None
    services: ConsoleServices
    member: ClusterMember | None = None


async def build_console(
    config: HeraldConfig,
    bots: Sequence[ConsoleBot],
    environ: Mapping[str, str],
    *,
    readiness: Readiness,
) -> web.Application | None:
    """The console's application for ``PREFIX``, or None when this process does not serve it."""
    settings = config.console
    if not settings.enabled:
        return None
    token = console_token(environ)
    host = config.gateway.http_host
    if token is None and not is_loopback(host):
        log.warning("the console is not served: gateway.http_host is %s (not loopback) and %s is not set",
                    host, CONSOLE_TOKEN)  # fmt: skip
        return None
    runtime = bots[0].services.runtime
    secret = await GatewayFacts(runtime.storage).settle(SECRET_FACT, secrets.token_hex(32))
    console = ConsoleWeb(
        signer=Signer(derive_key(bytes.fromhex(secret), token)),
        renderer=Renderer(runtime.cron.timezone),
        links={bot.name: LoginLinks(bot.services.runtime.storage) for bot in bots},
        attempts=LoginAttempts(runtime.cluster.redis if runtime.cluster is not None else None),
        token=token,
        session_seconds=settings.session_hours * 3600,
        secure_cookies=(settings.public_url or "").startswith("https://"),
    )
    budgets = {bot.name: budget_source(bot.services) for bot in bots}
    named = {str(name): source for name, source in budgets.items() if name is not None}
    fleet = Fleet(named) if named else None
    pages = {
        bot.name: ConsolePages(
            console,
            bot.services,
            reports(bot.services, budgets[bot.name]),
            budgets=budgets[bot.name],
            misses=CacheMissSource(bot.services.runtime.store),
            readiness=readiness,
            member=bot.member,
            bot=bot.name,
            fleet=fleet,
        ).routes()
        for bot in bots
    }
    if fleet is None:
        return console.application(pages[None])
    return console.application(fleet_routes(console, fleet, {str(name): own for name, own in pages.items()}))


def budget_source(services: ConsoleServices) -> BudgetSource:
    return BudgetSource(services.budgets.book, services.runtime.storage)


def reports(services: ConsoleServices, budgets: BudgetSource) -> Reports:
    runtime = services.runtime
    return Reports(runtime.storage, runtime.store, runtime.cron.timezone, budgets.book)


def console_url(config: HeraldConfig, served_at: str) -> str:
    """The console's address for login links: ``console.public_url``, else where this process serves
    (an address listening on every interface is shown as the loopback one)."""
    base = config.console.public_url or served_at.replace("://0.0.0.0:", "://127.0.0.1:")
    return f"{base}{PREFIX}"
