"""A small web site on 127.0.0.1 for the browser tools: a form, a login, a list a script renders, and
ways out to another loopback port (a redirect, a script's fetch, a WebSocket) that the guard must stop.

``Site.inside`` is the site the browser may reach; ``Site.private`` is a second server on another port
standing for the owner's network (a router page, a database's HTTP port). A test proves the guard by
``private.hits`` staying empty: nothing the page did reached it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from aiohttp import web

SHUTDOWN_TIMEOUT = 2.0
PASSWORD = "correct horse"
SESSION_COOKIE = "site_session"
ITEMS = ["Heron", "Kingfisher", "Swift"]
CHECKLIST = b"heron,kingfisher\n"
# Names a site may suggest for a download, each behind /named/<n>: a way out of the folder, a dot file,
# a control character.
HOSTILE_NAMES = ["../../etc/passwd", ".bashrc", "notes\nrm -rf.txt"]
HUGE_DOWNLOAD_BYTES = 200 * 1024 * 1024  # far past any cap a test sets: a download that is not stopped

FORM = """<!doctype html><html><head><title>Order a bird book</title></head><body>
<h1>Order a bird book</h1>
<form method="post" action="/form">
<label>Your name <input name="name"></label>
<label>Edition <select name="edition"><option value="pb">Paperback</option>
<option value="hb">Hardback</option></select></label>
<button type="submit">Order</button>
</form></body></html>"""

LOGIN = """<!doctype html><html><head><title>Sign in</title></head><body>
<h1>Sign in</h1>{error}
<form method="post" action="/login">
<label>User name <input name="user"></label>
<label>Password <input type="password" name="password"></label>
<button type="submit">Sign in</button>
</form></body></html>"""

LIST = """<!doctype html><html><head><title>Sightings</title></head><body>
<h1>Sightings</h1><p id="state">Loading…</p><ul id="items"></ul>
<script>
setTimeout(async () => {
  const items = await (await fetch('/api/items')).json();
  for (const name of items) {
    const li = document.createElement('li'); li.textContent = name + ' seen today';
    document.getElementById('items').append(li);
  }
  document.getElementById('state').textContent = items.length + ' sightings loaded';
}, 300);
</script></body></html>"""

SNEAKY = """<!doctype html><html><head><title>Innocent page</title></head><body>
<h1>Nothing to see</h1><p id="out">waiting</p>
<script>
const out = document.getElementById('out');
fetch('{private}/steal').then(() => out.textContent = 'fetch went through',
                              () => out.textContent = 'fetch was stopped');
const ws = new WebSocket('{private_ws}/socket');
ws.onopen = () => document.title = 'socket opened';
ws.onerror = () => document.body.append(' socket was stopped');
</script></body></html>"""


def page(body: str) -> web.Response:
    return web.Response(text=body, content_type="text/html")


@dataclass
class Server:
    url: str = ""
    port: int = 0
    hits: list[str] = field(default_factory=list)

    @contextlib.asynccontextmanager
    async def serve(self, app: web.Application) -> AsyncIterator[None]:
        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.hits.append(request.path)
            response: web.StreamResponse = await handler(request)
            return response

        app.middlewares.append(record)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{self.port}"
            yield
        finally:
            await runner.cleanup()


@dataclass
class Site:
    inside: Server = field(default_factory=Server)
    private: Server = field(default_factory=Server)
    big_rows: int = 3000
    huge_cut: asyncio.Event = field(default_factory=asyncio.Event)  # /huge's reader went away part-way

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Site]:
        async with self.private.serve(self._private_app()), self.inside.serve(self._app()):
            yield self

    def _private_app(self) -> web.Application:
        app = web.Application()

        async def anything(request: web.Request) -> web.Response:
            return web.Response(text="the owner's router admin page")

        app.router.add_route("*", "/{tail:.*}", anything)
        return app

    def _app(self) -> web.Application:
        app = web.Application()

        async def home(request: web.Request) -> web.Response:
            return page(
                "<!doctype html><title>Birds</title><h1>Birds</h1>"
                '<a href="/form">Order a book</a> <a href="/login">Sign in</a> <a href="/list">Sightings</a>'
            )

        async def form(request: web.Request) -> web.Response:
            return page(FORM)

        async def ordered(request: web.Request) -> web.Response:
            data = await request.post()
            name = str(data.get("name", ""))
            edition = {"pb": "paperback", "hb": "hardback"}.get(str(data.get("edition")), "?")
            return page(f"<title>Ordered</title><p>Thank you, {name}: one {edition} is on its way.</p>")

        async def login(request: web.Request) -> web.Response:
            return page(LOGIN.format(error=""))

        async def signed_in(request: web.Request) -> web.Response:
            data = await request.post()
            if data.get("password") != PASSWORD:
                return page(LOGIN.format(error="<p>Wrong user name or password.</p>"))
            response = web.HTTPFound("/account")
            response.set_cookie(SESSION_COOKIE, str(data.get("user")), httponly=True)
            raise response

        async def account(request: web.Request) -> web.Response:
            user = request.cookies.get(SESSION_COOKIE)
            if user is None:
                raise web.HTTPFound("/login")
            return page(
                f"<title>Your account</title><h1>Welcome back, {user}</h1><p>You have 3 saved birds.</p>"
            )

        async def listing(request: web.Request) -> web.Response:
            return page(LIST)

        async def items(request: web.Request) -> web.Response:
            return web.Response(text=json.dumps(ITEMS), content_type="application/json")

        async def escape(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"{self.private.url}/admin")

        async def sneaky(request: web.Request) -> web.Response:
            ws = self.private.url.replace("http://", "ws://")
            return page(SNEAKY.replace("{private}", self.private.url).replace("{private_ws}", ws))

        async def big(request: web.Request) -> web.Response:
            rows = "".join(f"<li><a href='/row/{n}'>Row {n}</a></li>" for n in range(self.big_rows))
            return page(f"<title>Big</title><ul>{rows}</ul>")

        async def download(request: web.Request) -> web.Response:
            named = "".join(f"<a href='/named/{n}'>Named {n}</a> " for n in range(len(HOSTILE_NAMES)))
            return page(
                "<title>Files</title><a href='/file'>Get the checklist</a> <a href='/huge'>Get the atlas</a> "
                f"<a href='/file-escape'>Get the secret</a> {named}"
            )

        async def file(request: web.Request) -> web.Response:
            return web.Response(
                body=CHECKLIST,
                content_type="text/csv",
                headers={"Content-Disposition": "attachment; filename=checklist.csv"},
            )

        async def named(request: web.Request) -> web.Response:
            name = HOSTILE_NAMES[int(request.match_info["n"])]
            return web.Response(
                body=CHECKLIST,
                content_type="application/octet-stream",
                headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}"},
            )

        async def huge(request: web.Request) -> web.StreamResponse:
            answer = web.StreamResponse(
                headers={
                    "Content-Type": "application/octet-stream",
                    "Content-Disposition": "attachment; filename=atlas.bin",
                }
            )
            await answer.prepare(request)
            chunk = b"\0" * 65536
            try:
                for _ in range(HUGE_DOWNLOAD_BYTES // len(chunk)):
                    await answer.write(chunk)
            except ConnectionError:  # the browser stopped it part-way
                self.huge_cut.set()
            return answer

        async def file_escape(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"{self.private.url}/secret.csv")

        async def popups(request: web.Request) -> web.Response:
            return page(
                '<title>Popups</title><button onclick="for (let i = 0; i < 4; i++) '
                "window.open('/form')\">Open four</button>"
            )

        app.router.add_get("/", home)
        app.router.add_get("/form", form)
        app.router.add_post("/form", ordered)
        app.router.add_get("/login", login)
        app.router.add_post("/login", signed_in)
        app.router.add_get("/account", account)
        app.router.add_get("/list", listing)
        app.router.add_get("/api/items", items)
        app.router.add_get("/escape", escape)
        app.router.add_get("/sneaky", sneaky)
        app.router.add_get("/big", big)
        app.router.add_get("/popups", popups)
        app.router.add_get("/download", download)
        app.router.add_get("/file", file)
        app.router.add_get("/named/{n:[0-9]+}", named)
        app.router.add_get("/huge", huge)
        app.router.add_get("/file-escape", file_escape)
        return app
