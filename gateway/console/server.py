"""The console's web application: login, the guard in front of every page, and the page routes.

Mounted by the gateway's HTTP server at ``/console`` (``gateway.server.http``). Every route but the login page
needs a login cookie (``gateway.console.auth``): a page asked for without one redirects to the login
page, anything else gets 401. Every POST must carry the CSRF token of its login (the login form: of its
own cookie), else 403 and nothing is done. A POST that changes something answers with a redirect to the
page (so reloading does not repeat it) and a one-line notice for the next page shown.

With ``bots:`` one console serves every bot (``gateway.console.bots``): one login, and each bot's login
links (made in its own database by its ``/console``) are redeemed here; a link's login sees its bot only.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from gateway.console.attempts import LoginAttempts
from gateway.console.auth import LOGIN_COOKIE, SESSION_COOKIE, Login, Signer, same
from gateway.console.links import LoginLinks
from gateway.console.render import SECURITY_HEADERS, Renderer

log = logging.getLogger(__name__)

PREFIX = "/console"
FLASH_COOKIE = "herald_console_notice"
LOGIN_ROUTE = "login"
MAX_FORM_BYTES = 64 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Notice:
    kind: str  # "ok" or "error"
    text: str


class ConsoleWeb:
    """Login, guard and page plumbing; the pages themselves are ``gateway.console.pages``."""

    def __init__(
        self,
        *,
        signer: Signer,
        renderer: Renderer,
        links: Mapping[str | None, LoginLinks],  # each bot's (None: the one bot without bots:)
        attempts: LoginAttempts,
        token: str | None,
        session_seconds: float,
        secure_cookies: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signer = signer
        self.renderer = renderer
        self.links = links
        self.attempts = attempts
        self.token = token
        self.session_seconds = session_seconds
        self.secure_cookies = secure_cookies
        self.clock = clock

    # --- the application -------------------------------------------------------------------------

    def application(self, pages: Mapping[str, tuple[str, Handler]]) -> web.Application:
        """The sub-application for ``/console``: ``pages`` maps a path to its (method, handler)."""
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_FORM_BYTES)
        app.on_response_prepare.append(_security_headers)
        app[CONSOLE_WEB] = self
        app.router.add_get("/login", self._login_page, name=LOGIN_ROUTE)
        app.router.add_post("/login", self._login, name="login_post")
        app.router.add_post("/logout", self._logout)
        for path, (method, handler) in pages.items():
            app.router.add_route(method, path, handler)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.name
        public = route in (LOGIN_ROUTE, "login_post")
        now = self.clock()
        login = self.signer.login(request.cookies.get(SESSION_COOKIE), now)
        if login is None and not public:
            if request.method in ("GET", "HEAD"):
                raise web.HTTPSeeOther(f"{PREFIX}/login?next={quote(request.path_qs, safe='')}")
            return self.message(request, "Log in first", "This needs a console login.", status=401)
        if request.method == "POST":
            form = await request.post()
            nonce = self._form_nonce(request, now) if public else login.nonce if login else None
            given = form.get("csrf")
            if nonce is None or not self.signer.csrf_ok(nonce, given if isinstance(given, str) else None):
                log.warning("console: refused a %s %s without a valid CSRF token (from %s)",
                            request.method, request.path, request.remote)  # fmt: skip
                return self.message(
                    request,
                    "Form refused",
                    "This form is out of date or was not sent from the console; reload the page and try "
                    "again.",
                    status=403,
                )
        return await handler(request)

    def _form_nonce(self, request: web.Request, now: float) -> str | None:
        form = self.signer.login_form(request.cookies.get(LOGIN_COOKIE), now)
        return form.nonce if form else None

    # --- helpers for pages -----------------------------------------------------------------------

    def logged_in(self, request: web.Request) -> Login | None:
        return self.signer.login(request.cookies.get(SESSION_COOKIE), self.clock())

    def render(
        self, request: web.Request, template: str, values: Mapping[str, Any], *, status: int = 200
    ) -> web.Response:
        """A page, with the nav bar of a logged-in user and the notice left by the last POST."""
        login = self.logged_in(request)
        notice = self._notice(request)
        response = web.Response(
            text=self.renderer.page(
                template,
                {
                    "csrf": self.signer.csrf(login.nonce) if login else None,
                    "flash": notice,
                    "here": request.path,
                    "now": self.clock(),
                    "base": PREFIX,  # where the pages' links start (a bot's pages: under its name)
                    "bot": None,  # the bot a page is of, shown in its title (bots:)
                    "switcher": (),  # (bot, its page, shown now) for each bot the login sees (bots:)
                    **values,
                },
            ),
            content_type="text/html",
            status=status,
        )
        if notice is not None:
            response.del_cookie(FLASH_COOKIE, path=PREFIX)
        return response

    def message(self, request: web.Request, heading: str, text: str, *, status: int) -> web.Response:
        return self.render(
            request, "message.html", {"heading": heading, "text": text, "back": None}, status=status
        )

    def done(self, location: str, notice: Notice) -> web.HTTPSeeOther:
        """Redirect to ``location`` (a console path), which then shows ``notice``."""
        response = web.HTTPSeeOther(location)
        response.set_cookie(
            FLASH_COOKIE, self._signed_notice(notice), path=PREFIX, max_age=60, httponly=True,
            samesite="Strict", secure=self.secure_cookies,
        )  # fmt: skip
        return response

    def _signed_notice(self, notice: Notice) -> str:
        body = base64.urlsafe_b64encode(f"{notice.kind}\n{notice.text[:500]}".encode()).decode()
        return f"{body}.{self.signer.csrf('notice:' + body)}"

    def _notice(self, request: web.Request) -> Notice | None:
        body, _, signature = request.cookies.get(FLASH_COOKIE, "").partition(".")
        if not body or not self.signer.csrf_ok("notice:" + body, signature):
            return None
        try:
            kind, _, text = base64.urlsafe_b64decode(body).decode().partition("\n")
        except (ValueError, UnicodeDecodeError):
            return None
        return Notice("error" if kind == "error" else "ok", text)

    # --- logging in and out ----------------------------------------------------------------------

    async def _login_page(self, request: web.Request) -> web.StreamResponse:
        if self.logged_in(request) is not None:
            raise web.HTTPSeeOther(_next(request.query.get("next")))
        return self._login_form(request, self.clock(), link=request.query.get("link", ""), error=None)

    def _login_form(
        self, request: web.Request, now: float, *, link: str, error: str | None, status: int = 200
    ) -> web.Response:
        cookie = self.signer.new_login_form(now)
        form = self.signer.login_form(cookie, now)
        assert form is not None
        response = self.render(
            request,
            "login.html",
            {
                "heading": "Log in",
                "error": error,
                "link": link,
                "next": _next(request.query.get("next")),
                "form_csrf": self.signer.csrf(form.nonce),
                "token_login": self.token is not None,
            },
            status=status,
        )
        response.set_cookie(
            LOGIN_COOKIE, cookie, path=PREFIX, httponly=True, samesite="Strict", secure=self.secure_cookies
        )
        return response

    async def _login(self, request: web.Request) -> web.StreamResponse:
        """A correct token or link logs in, whatever failed before it from the same address; a failure
        is answered late (``gateway.console.attempts``), never at the right credential's expense."""
        form = await request.post()
        address = request.remote or "unknown"
        link, token = _text(form.get("link")), _text(form.get("token"))
        who: str | None = None
        scope: str | None = None  # a bot's link logs in to that bot only
        if link:
            for bot, links in self.links.items():
                if made_by := await links.redeem(link):
                    who, scope = f"a link from {made_by}" + (f" (bot {bot})" if bot else ""), bot
                    break
            error = "This login link was used already or has expired; send /console to the bot for a new one."
        else:
            if self.token is not None and token and same(token, self.token):
                who = "the console token"
            error = (
                "That is not the console token."
                if self.token is not None
                else "Log in with a link from the bot."
            )
        if who is None:
            log.warning("console: failed login from %s", address)
            if not await self.attempts.failed(address):
                return self.message(
                    request,
                    "Too many failed logins",
                    "Too many failed logins are being tried at once; try again in a minute.",
                    status=429,
                )
            return self._login_form(request, self.clock(), link="", error=error, status=401)
        now = self.clock()
        log.info("console: logged in with %s from %s", who, address)
        response = web.HTTPSeeOther(_next(_text(form.get("next"))))
        response.set_cookie(
            SESSION_COOKIE, self.signer.new_login(now, self.session_seconds, scope), path=PREFIX,
            max_age=int(self.session_seconds), httponly=True, samesite="Strict", secure=self.secure_cookies,
        )  # fmt: skip
        response.del_cookie(LOGIN_COOKIE, path=PREFIX)
        raise response

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        response = web.HTTPSeeOther(f"{PREFIX}/login")
        response.del_cookie(SESSION_COOKIE, path=PREFIX)
        raise response


CONSOLE_WEB = web.AppKey("console_web", ConsoleWeb)  # the console an application serves


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _next(value: str | None) -> str:
    """Where to go after logging in: a console page of this site, never another site."""
    if value and value.startswith(f"{PREFIX}/") and not value.startswith("//") and "\\" not in value:
        return value
    return f"{PREFIX}/"


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)
