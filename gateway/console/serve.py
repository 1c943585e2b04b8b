"""Whether this gateway process serves the console, and the console built on its services.

The console is served on the gateway's HTTP server (``gateway.http_host``, loopback by default). On an
address other than loopback, someone else on the network could reach its login page: it is served there
only with ``HERALD_CONSOLE_TOKEN`` set, and never with a token too short to resist guessing (a
ConfigError at start, one sentence saying what to set).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config import ConfigError, HeraldConfig
from gateway.console.attempts import LoginAttempts
from gateway.console.auth import Signer, derive_key, weak_token
from gateway.console.links import LoginLinks
from gateway.console.pages import ConsolePages, Readiness
from gateway.console.render import Renderer
from gateway.console.reports import Reports
from gateway.console.server import PREFIX, ConsoleWeb
from gateway.console.sources import BudgetSource, CacheMissSource
from gateway.home.facts import GatewayFacts
from gateway.services import Services

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


async def build_console(
    config: HeraldConfig,
    services: Services,
    environ: Mapping[str, str],
    *,
    readiness: Readiness,
    budgets: BudgetSource,
    misses: CacheMissSource,
    member: ClusterMember | None = None,
) -> web.Application | None:
    """The console's application for ``PREFIX``, or None when this process does not serve it; it reads
    spend limits from ``budgets`` and cache misses from ``misses``."""
    settings = config.console
    if not settings.enabled:
        return None
    token = console_token(environ)
    host = config.gateway.http_host
    if token is None and not is_loopback(host):
        log.warning("the console is not served: gateway.http_host is %s (not loopback) and %s is not set",
                    host, CONSOLE_TOKEN)  # fmt: skip
        return None
    runtime = services.runtime
    secret = await GatewayFacts(runtime.storage).settle(SECRET_FACT, secrets.token_hex(32))
    timezone = runtime.cron.timezone
    console = ConsoleWeb(
        signer=Signer(derive_key(bytes.fromhex(secret), token)),
        renderer=Renderer(timezone),
        links=LoginLinks(runtime.storage),
        attempts=LoginAttempts(runtime.cluster.redis if runtime.cluster is not None else None),
        token=token,
        session_seconds=settings.session_hours * 3600,
        secure_cookies=(settings.public_url or "").startswith("https://"),
    )
    pages = ConsolePages(
        console,
        services,
        Reports(runtime.storage, runtime.store, timezone, budgets.book),
        budgets=budgets,
        misses=misses,
        readiness=readiness,
        member=member,
    )
    return console.application(pages.routes())


def console_url(config: HeraldConfig, served_at: str) -> str:
    """The console's address for login links: ``console.public_url``, else where this process serves
    (an address listening on every interface is shown as the loopback one)."""
    base = config.console.public_url or served_at.replace("://0.0.0.0:", "://127.0.0.1:")
    return f"{base}{PREFIX}"
