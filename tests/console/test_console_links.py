"""Logging into the console with a one-time link from the bot: ``/console`` (admins, direct chats only),
the link logs in once and for ten minutes, and it is kept in the database every process shares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from gateway.console.auth import Signer, derive_key
from gateway.console.links import LINK_SECONDS, LoginLinks
from gateway.home import HeraldHome
from gateway.home.facts import GatewayFacts
from tests.console_support import CSRF, console_client, console_gateway
from tests.emulator import ProviderEmulator
from tests.gateway_support import ADMIN, FRIEND

pytestmark = pytest.mark.timeout(90)

LINK = re.compile(r"(http://\S+/console/login\?link=(\S+))")


async def test_an_admin_gets_a_link_that_logs_in_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url, token=None) as console:
        harness = console.harness
        harness.fake.private_message(FRIEND, "/console")
        harness.fake.group_message(-100, ADMIN, "/console", command=True)
        harness.fake.private_message(ADMIN, "/console")
        await harness.settled()
        assert harness.texts(FRIEND) == ["Only an admin can use /console."]
        assert harness.texts(-100) == [
            "Ask me for /console in a direct chat: a login link must not be shown to a group."
        ]
        [reply] = harness.texts(ADMIN)
        found = LINK.search(reply)
        assert found and "works once, within 10 minutes" in reply
        url, secret = found.groups()
        assert url.startswith(console.url + "/console/login?link=")

        async with console_client(console.url) as client:
            status, text, _ = await client.get("/console/login")
            assert "Send <b>/console</b> to the bot" in text and 'name="token"' not in text  # no token set
            for _ in range(2):  # showing the page (a link preview, a reload) does not use the link up
                status, text, _ = await client.get(url.removeprefix(console.url))
                assert status == 200 and f'name="link" value="{secret}"' in text
            form = {"csrf": CSRF.search(text).group(1), "link": secret}  # type: ignore[union-attr]
            status, _, response = await client.post("/console/login", form)
            assert status == 303 and "herald_console" in response.cookies
            assert (await client.get("/console/chats"))[0] == 200

        async with console_client(console.url) as other:  # the same link a second time
            _, text, _ = await other.get(url.removeprefix(console.url))
            form = {"csrf": CSRF.search(text).group(1), "link": secret}  # type: ignore[union-attr]
            status, text, response = await other.post("/console/login", form)
            assert status == 401 and "herald_console" not in response.cookies
            assert "This login link was used already or has expired" in text


async def test_a_link_expires_and_works_through_any_process_of_the_database(
    storage: Storage, tmp_path: Path, database_url: str | None
) -> None:
    clock = [1_000_000.0]
    links = LoginLinks(storage, clock=lambda: clock[0])
    late = await links.issue("telegram:1")
    early = await links.issue("telegram:1")
    async with open_storage(parse_storage_url(database_url, tmp_path / "state.db")) as elsewhere:
        other = LoginLinks(elsewhere, clock=lambda: clock[0])  # another process, the same database
        assert await other.redeem(early) == "telegram:1"
        assert await other.redeem(early) is None  # once
        assert await other.redeem("made-up") is None
        clock[0] += LINK_SECONDS + 1
        assert await other.redeem(late) is None  # too late

        # Each process derives the cookies' key from the same stored secret: a login made on one
        # process is valid on the others.
        first = await GatewayFacts(storage).settle("console_secret", "aa" * 32)
        second = await GatewayFacts(elsewhere).settle("console_secret", "bb" * 32)
        assert first == second == "aa" * 32
        cookie = Signer(derive_key(bytes.fromhex(first), "t" * 16)).new_login(clock[0], 60)
        assert Signer(derive_key(bytes.fromhex(second), "t" * 16)).login(cookie, clock[0]) is not None
        assert Signer(derive_key(bytes.fromhex(second), "u" * 16)).login(cookie, clock[0]) is None
