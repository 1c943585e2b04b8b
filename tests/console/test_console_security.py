"""The operator console's guard, over HTTP against a running gateway: no page without a login, no change
without the page's CSRF token, the cookie's attributes, failed logins slowed (the right token never
locked out), user text escaped, and no console on an open address without a token."""

from __future__ import annotations

import asyncio
import time

import pytest
import sqlalchemy as sa

from agent.db.schema import cache_misses, requests
from gateway.config import ConfigError
from gateway.console.attempts import FREE_FAILURES, LONGEST_DELAY, delay_after
from gateway.console.links import LoginLinks
from gateway.cron.manage import COMMAND_LINE
from gateway.home import HeraldHome
from tests.cluster_leader_support import until
from tests.console_support import CONSOLE_TOKEN, CSRF, HeldBack, console_client, console_gateway
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND, STRANGER, telegram_gateway

pytestmark = pytest.mark.timeout(90)

XSS = "<img src=x onerror=alert(1)>"


async def test_every_console_route_wants_a_login(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with (
        console_gateway(home, emulator, emulator_url) as console,
        console_client(console.url) as client,
    ):
        routes = console.routes()
        assert len(routes) >= 13  # the pages and their actions (a new route is covered as it comes)
        for method, path in routes:
            if path == "/console/login":
                continue
            if method == "GET":
                status, _, response = await client.get(path)
                assert status == 303, (path, status)
                assert response.headers["Location"].startswith("/console/login?next="), path
            else:
                status, text, _ = await client.post(path, {})
                assert status == 401, (path, status)
                assert "This needs a console login." in text
        status, _, response = await client.get("/console")
        assert (status, response.headers["Location"]) == (302, "/console/")

        client.session.cookie_jar.update_cookies({"herald_console": "v1.9999999999.forged.c2lnbmF0dXJl"})
        status, _, _ = await client.get("/console/chats")
        assert status == 303  # a cookie the gateway did not sign opens nothing

        await client.login()
        status, _, _ = await client.get("/console/chats")
        assert status == 200
        csrf = await client.csrf()
        status, _, _ = await client.post("/console/logout", {"csrf": csrf})
        assert status == 303
        status, _, _ = await client.get("/console/chats")
        assert status == 303


async def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url) as console:
        harness = console.harness
        cron = harness.gateway.services.runtime.cron
        target = f"telegram:{FRIEND}"
        job = await cron.create(COMMAND_LINE, prompt="Report", schedule="every 2h", target=target)
        harness.fake.private_message(STRANGER, "let me in", first_name="Eve")
        await harness.settled()
        [pending] = await harness.gateway.services.pairing.pending()
        async with console_client(console.url) as client, console_client(console.url) as other:
            await client.login()
            await other.login()
            foreign = await other.csrf()  # a valid token, of another login
            pause = f"/console/jobs/{job.id}/pause"
            approve = {"platform": "telegram", "code": pending.code}
            for form in ({}, {"csrf": ""}, {"csrf": "forged"}, {"csrf": foreign}):
                status, text, _ = await client.post(pause, form)
                assert status == 403, form
                assert "This form is out of date or was not sent from the console" in text
                status, _, _ = await client.post("/console/pairing/approve", {**approve, **form})
                assert status == 403
            assert (await cron.jobs.get(job.id)).enabled  # type: ignore[union-attr]
            assert [p.code for p in await harness.gateway.services.pairing.pending()] == [pending.code]

            status, _, response = await client.post(pause, {"csrf": await client.csrf()})
            assert (status, response.headers["Location"]) == (303, "/console/jobs")
            assert not (await cron.jobs.get(job.id)).enabled  # type: ignore[union-attr]

        async with console_client(console.url) as client:  # the login form is no exception
            status, _, _ = await client.post("/console/login", {"token": CONSOLE_TOKEN})
            assert status == 403
            status, _, _ = await client.get("/console/chats")
            assert status == 303


async def test_the_login_cookie_is_httponly_strict_and_only_the_token_gives_one(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with (
        console_gateway(home, emulator, emulator_url) as console,
        console_client(console.url) as client,
    ):
        form = await client.csrf("/console/login")
        status, text, response = await client.post("/console/login", {"csrf": form, "token": "not-the-token"})
        assert status == 401
        assert "That is not the console token." in text
        assert "herald_console" not in response.cookies

        response = await client.login()
        cookie = response.cookies["herald_console"]
        assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/console"
        assert not cookie["secure"]  # plain http on loopback: a Secure cookie would never come back
        status, _, page = await client.get("/console/")
        assert status == 200
        headers = page.headers
        assert "script-src" not in headers["Content-Security-Policy"]  # default-src 'none': no script
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY" and headers["Referrer-Policy"] == "no-referrer"


async def test_behind_an_https_address_the_cookie_is_secure(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    public = {"public_url": "https://herald.example.com"}
    async with (
        console_gateway(home, emulator, emulator_url, console=public) as console,
        console_client(console.url) as client,
    ):
        _, text, page = await client.get("/console/login")
        form_cookie = page.cookies["herald_console_login"]
        assert form_cookie["secure"]  # so this client (plain http) does not send it back by itself
        form = {"csrf": CSRF.search(text).group(1), "token": CONSOLE_TOKEN}  # type: ignore[union-attr]
        cookies = {"herald_console_login": form_cookie.value}  # as a browser on https:// would send it
        async with client.session.post(
            client.url + "/console/login", data=form, cookies=cookies, allow_redirects=False
        ) as response:
            assert response.status == 303
            assert response.cookies["herald_console"]["secure"]


async def test_failed_logins_are_slowed_but_the_right_token_or_a_fresh_link_always_logs_in(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Behind a reverse proxy every browser has one address: ten bad tries must not keep the operator
    out. Each failure's answer is held back longer (on virtual time), up to a bound; a right one never."""
    async with (
        console_gateway(home, emulator, emulator_url) as console,
        console_client(console.url) as guesser,
    ):
        held = HeldBack()
        console.attempts.sleep = held
        for _ in range(10):
            form = await guesser.csrf("/console/login")
            status, text, _ = await guesser.post("/console/login", {"csrf": form, "token": "guess"})
            assert status == 401 and "That is not the console token." in text
        assert held.delays == [delay_after(n) for n in range(1, 11) if delay_after(n) > 0]
        assert len(held.delays) == 10 - FREE_FAILURES and held.delays[0] > 0  # the first few: at once
        assert held.delays == sorted(held.delays) and held.delays[-1] == held.delays[-2] == LONGEST_DELAY

        async with console_client(console.url) as owner:  # the same address
            await owner.login()
            assert (await owner.get("/console/chats"))[0] == 200
        secret = await LoginLinks(console.harness.gateway.services.runtime.storage).issue("telegram:1")
        async with console_client(console.url) as owner:
            await owner.login_with_link(secret)
            assert (await owner.get("/console/chats"))[0] == 200
        assert len(held.delays) == 10 - FREE_FAILURES  # neither was held back

        form = await guesser.csrf("/console/login")
        status, _, _ = await guesser.post("/console/login", {"csrf": form, "link": secret})  # used
        assert status == 401 and held.delays[-1] == LONGEST_DELAY and len(held.delays) == 11 - FREE_FAILURES


async def test_only_so_many_failed_logins_wait_at_once_and_the_right_token_passes_them(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The delay cannot be used to tie the server up: past ``most_held`` waiting failures the next is
    refused at once (429), and the right token still logs in meanwhile."""
    async with console_gateway(home, emulator, emulator_url) as console:
        held = HeldBack()
        console.attempts.sleep, console.attempts.most_held = held, 2
        async with console_client(console.url) as guesser:
            for _ in range(FREE_FAILURES):
                form = await guesser.csrf("/console/login")
                assert (await guesser.post("/console/login", {"csrf": form, "token": "guess"}))[0] == 401
            held.hold()
            form = await guesser.csrf("/console/login")
            waiting = [
                asyncio.create_task(guesser.post("/console/login", {"csrf": form, "token": f"guess {n}"}))
                for n in range(2)
            ]
            await until(lambda: held.waiting == 2, 20, "two failures held back")
            status, text, _ = await guesser.post("/console/login", {"csrf": form, "token": "one more"})
            assert status == 429 and "Too many failed logins are being tried at once" in text
            async with console_client(console.url) as owner:
                await owner.login()
            assert not any(task.done() for task in waiting)
            held.release()
            assert [(await task)[0] for task in waiting] == [401, 401]


async def test_names_and_titles_people_wrote_are_shown_as_text(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url) as console:
        fake = console.harness.fake
        fake.group_message(-100, FRIEND, "<script>alert(2)</script> hi", mention_bot=True, title=XSS)
        fake.private_message(STRANGER, "let me in", first_name="<b onmouseover=alert(3)>Eve</b>")
        await console.harness.settled()
        async with console_client(console.url) as client:
            await client.login()
            pages = {
                path: (await client.get(path))[1]
                for path in ("/console/chats", "/console/chat?key=telegram:group:-100", "/console/pairing")
            }
    for path in ("/console/chats", "/console/chat?key=telegram:group:-100"):
        text = pages[path]
        assert "&lt;img src=x onerror=alert(1)&gt;" in text, path
        assert "&lt;script&gt;alert(2)&lt;/script&gt;" in text, path
        assert "<img" not in text and "<script" not in text, path
    assert "&lt;b onmouseover=alert(3)&gt;Eve&lt;/b&gt;" in pages["/console/pairing"]
    assert "<b onmouseover" not in pages["/console/pairing"]


async def test_on_an_open_address_the_console_needs_a_token(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    open_address = {"http_host": "0.0.0.0"}
    async with console_gateway(home, emulator, emulator_url, token=None, gateway=open_address) as console:
        port = console.url.rsplit(":", 1)[1]
        async with console_client(f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz"))[0] == 200
            assert (await client.get("/console/login"))[0] == 404
        assert console.harness.gateway.services.console_url is None

    async with console_gateway(home, emulator, emulator_url, gateway=open_address) as console:
        port = console.url.rsplit(":", 1)[1]
        async with console_client(f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/console/login"))[0] == 200

    with pytest.raises(ConfigError, match="HERALD_CONSOLE_TOKEN has 5 characters; use at least 16"):
        async with telegram_gateway(home, emulator, emulator_url, environ={"HERALD_CONSOLE_TOKEN": "short"}):
            pass


async def test_scope_names_cause_labels_and_titles_on_the_budget_and_miss_pages_are_text(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    hostile_key = "telegram:<img/src=x/onerror=alert(5)>"  # a valid override key, as config.yaml may hold
    budgets = {"chat": {"daily_usd": 1.0}, "overrides": {hostile_key: {"daily_usd": 2.0}}}
    async with console_gateway(home, emulator, emulator_url, budgets=budgets) as console:
        console.harness.fake.group_message(-100, FRIEND, "hi", mention_bot=True, title=XSS)
        await console.harness.settled()
        storage = console.harness.gateway.services.runtime.storage
        latest = sa.select(sa.func.max(requests.c.id))
        request_id = await storage.read(lambda conn: conn.execute(latest).scalar())
        row = {
            "session_key": "telegram:group:-100", "session_id": "s", "request_id": request_id,
            "purpose": "turn", "model": "m", "cause": "<script>alert(4)</script>", "expected_tokens": 5000,
            "read_tokens": 0,
            "missed_tokens": 5000, "missed_usd": 0.01, "detail": "<img src=x onerror=alert(6)>",
            "created_at": time.time(),
        }  # fmt: skip  (a row written behind Herald's back: whatever it holds is shown as text)
        await storage.write(lambda conn: conn.execute(sa.insert(cache_misses).values(**row)))
        async with console_client(console.url) as client:
            await client.login()
            pages = {
                path: (await client.get(path))[1]
                for path in ("/console/budgets", "/console/", "/console/chats?sort=misses",
                             "/console/chat?key=telegram:group:-100")
            }  # fmt: skip
    assert "telegram:&lt;img/src=x/onerror=alert(5)&gt;" in pages["/console/budgets"]
    for path in ("/console/", "/console/chat?key=telegram:group:-100"):
        assert "&lt;script&gt;alert(4)&lt;/script&gt;" in pages[path], path
    chat = pages["/console/chat?key=telegram:group:-100"]
    assert 'data-cause="&lt;script&gt;alert(4)&lt;/script&gt;"' in chat  # the marker's colour class too
    assert "&lt;img src=x onerror=alert(6)&gt;" in chat and "&lt;img src=x onerror=alert(1)&gt;" in chat
    for path, text in pages.items():
        assert "<img" not in text and "<script" not in text, path
