"""A chat's page in the console lists its latest replies: when each was queued and sent, an excerpt of
its text (as text, never markup), its state in the outbox and what the platform last said of it
(WhatsApp's statuses: sent, delivered, read, failed; blank on a platform that reports none). Each chat,
and each topic of a forum, shows its own replies only, found through an index however large the outbox."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

from agent.db import Storage
from gateway.console.reports import REPLIES
from gateway.home import HeraldHome
from tests.conformance.harness import running
from tests.conformance.whatsapp_driver import WhatsAppDriver
from tests.console_support import CONSOLE_TOKEN, console_client, console_gateway
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import FRIEND

pytestmark = pytest.mark.timeout(120)

XSS = "<img src=x onerror=alert(1)>"
GROUP, TOPIC = -100, 7


class ConsoleDriver(WhatsAppDriver):
    """The WhatsApp fake, with the console's login token set."""

    def environ(self) -> dict[str, str]:
        return {**super().environ(), "HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}


def replies(page: str) -> list[tuple[str, str, str]]:
    """The "Recent replies" table of a chat's page, top to bottom: (excerpt, state, delivery) of each
    row, as the page's HTML has them (escaped)."""
    table = page.split('<table id="replies">')[1].split("</table>")[0]
    rows = re.findall(
        r'<tr data-reply="\d+">.*?<td class="text title">(.*?)</td>'
        r'<td class="state">(.*?)</td><td class="delivery">(.*?)</td></tr>',
        table,
    )
    return [(text, _word(state), _word(delivery)) for text, state, delivery in rows]


def _word(cell: str) -> str:
    """The word a cell's pill says ("" for an empty cell)."""
    return re.sub(r"<[^>]+>", "", cell)


@pytest.mark.each_database  # the statuses are recorded on the outbox rows, in either database
async def test_a_whatsapp_chat_shows_what_the_platform_said_of_each_reply(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text="Hello."), Reply(text="Hi, admin."), Reply(text="Second answer."))
    driver = ConsoleDriver()
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.fake.text(driver.friend, "hello")
        await platform.settled()
        driver.fake.text(driver.admin, "hi")
        await platform.settled()
        driver.fake.text(driver.friend, "and again")
        await platform.settled()
        first, second = driver.fake.bot_messages(driver.friend)
        [admins] = driver.fake.bot_messages(driver.admin)
        for reported in ("sent", "delivered", "read"):
            driver.fake.status(first.id, reported)
        driver.fake.status(second.id, "delivered")
        driver.fake.status(admins.id, "read")
        await platform.settled()  # every webhook answered: the adapter answers once the sink recorded it
        async with console_client(platform.gateway.http.url) as client:
            await client.login()
            answered, page, _ = await client.get(f"/console/chat?key=whatsapp:dm:{driver.friend}")
    assert answered == 200
    newest_first = [("Second answer.", "sent", "delivered"), ("Hello.", "sent", "read")]
    assert replies(page) == newest_first
    assert "Hi, admin." not in page  # another chat's reply


async def test_a_telegram_chat_shows_its_replies_escaped_with_no_delivery_word(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """Telegram reports no delivery: the column stays blank. A reply that reads as HTML shows as the
    characters it is. A forum's topic is a chat of its own: its replies are on its page, not the group's.
    (Not streamed: each answer is one send through the outbox, not the edit of a streamed message.)"""
    emulator.script(Reply(text=f"Look: {XSS}"), Reply(text="In the topic."), Reply(text="Direct."))
    async with console_gateway(home, emulator, emulator_url, gateway={"stream_edit_interval": 0}) as console:
        fake = console.harness.fake
        fake.group_message(GROUP, FRIEND, "hello bot", mention_bot=True, is_forum=True)
        await console.harness.settled()
        fake.group_message(GROUP, FRIEND, "and here", mention_bot=True, is_forum=True, thread_id=TOPIC)
        await console.harness.settled()
        fake.private_message(FRIEND, "hello")
        await console.harness.settled()
        async with console_client(console.url) as client:
            await client.login()
            pages = {
                key: (await client.get(f"/console/chat?key={key}"))[1]
                for key in (f"telegram:group:{GROUP}", f"telegram:group:{GROUP}:topic:{TOPIC}",
                            f"telegram:dm:{FRIEND}")
            }  # fmt: skip
    group, topic, direct = pages.values()
    assert replies(group) == [("Look: &lt;img src=x onerror=alert(1)&gt;", "sent", "")]
    assert XSS not in group
    assert replies(topic) == [("In the topic.", "sent", "")]
    assert replies(direct) == [("Direct.", "sent", "")]


@pytest.mark.parametrize("thread", [None, "7"])
async def test_a_chats_latest_replies_are_read_from_an_index_not_a_scan(
    storage: Storage, thread: str | None
) -> None:
    """The outbox grows with every reply: the plan of the page's query searches its index by chat and
    thread and reads it from the newest end (no scan of the outbox, no sort of the chat's rows)."""
    statement = REPLIES[thread is not None]
    parameters: dict[str, Any] = {"platform": "telegram", "chat": "-100", "thread": thread, "limit": 20}

    def plan(conn: sa.Connection) -> str:
        bound = statement.params(**parameters)
        sql = str(bound.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if storage.dialect == "sqlite":
            return "\n".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        # An empty table is read whole whatever its indexes; forbid that to see whether one serves.
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        return "\n".join(str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}"))

    found = await storage.write(plan)
    if storage.dialect == "sqlite":
        assert "SEARCH outbox USING INDEX outbox_by_chat" in found, found
        assert "SCAN" not in found and "TEMP B-TREE" not in found, found
    else:
        assert "Index Scan Backward using outbox_by_chat" in found, found
        assert "Seq Scan" not in found and "Sort" not in found, found
