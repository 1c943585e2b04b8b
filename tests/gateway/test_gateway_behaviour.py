"""Gateway behaviour a user or an operator notices: busy policies, /stop, hygiene, health, webhooks."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from typing import Any

import aiohttp
import pytest

from adapters.base import ChatType, InboundMessage
from adapters.telegram.webhook import SECRET_HEADER, webhook_secret
from agent.db.errors import StorageUnavailable
from agent.memory import OWNER_SCOPE
from agent.model.messages import Message, ToolCall
from agent.tool_runs import with_payload
from gateway.app import open_gateway
from gateway.chats import session_key
from gateway.config import HeraldConfig
from gateway.conversation.addressing import session_spec
from gateway.home import HeraldHome
from gateway.ledger.inbox import Inbox, InboxState
from gateway.wiring.runtime import open_agent_runtime
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.fakes.waiting import wait_until
from tests.gateway_support import ADMIN, FRIEND, Harness, gateway_config, telegram_gateway
from tests.helpers import ChatResponder
from tests.state_support import put_memory


def last_user_text(request_json: dict) -> str:
    return str(request_json["messages"][-1]["content"][0]["text"])


async def wait_for_requests(emulator: ProviderEmulator, count: int) -> None:
    await wait_until(lambda: len(emulator.requests) >= count, what=f"{count} model request(s)")


async def answering_half_way(harness: Harness) -> None:
    """Until the held answer (``hold_streams``) stopped half-way with part of it in the chat."""
    await wait_until(lambda: harness.emulator.holding, what="the answer held half-way")
    await harness.fake.wait_for(lambda: harness.texts(FRIEND), what="part of the answer in the chat")


async def test_queue_policy_answers_messages_of_a_chat_in_order(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.stream_delay = 0.01
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        for n in range(3):
            harness.fake.private_message(FRIEND, f"message {n}")
        await harness.settled()
        answers = harness.texts(FRIEND)
    assert [last_user_text(r.json) for r in emulator.requests] == ["message 0", "message 1", "message 2"]
    assert [a.split("to: ")[1][:9] for a in answers] == ["message 0", "message 1", "message 2"]
    assert emulator.max_in_flight == 1


async def test_interrupt_policy_cancels_the_running_turn_for_the_newest_message(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text_tokens=400), Reply(text="Answer to the second."))
    emulator.hold_streams()
    async with telegram_gateway(
        home, emulator, emulator_url, gateway={"busy_policy": "interrupt"}
    ) as harness:
        harness.fake.private_message(FRIEND, "a long question")
        await answering_half_way(harness)
        harness.fake.private_message(FRIEND, "never mind, this instead")
        await harness.settled()
        answers = harness.texts(FRIEND)
        store = harness.gateway.services.runtime.store
        [session] = await store.sessions.recent()
        history = await store.messages.load(session.id)
    assert answers[-1] == "Answer to the second."
    assert all(a.endswith("(stopped)") for a in answers[:-1])
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[1].content == "(The user cancelled this turn.)"


async def test_an_interrupt_that_cannot_get_through_leaves_the_turn_to_finish_and_answers_next(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reaching the running turn hangs (a cluster's Redis partitioned away): the new message waits
    for that at most INTERRUPT_WAIT, then is queued behind the turn, which finishes; both answered."""
    import gateway.intake.router

    monkeypatch.setattr(gateway.intake.router, "INTERRUPT_WAIT", 0.3)
    emulator.stream_delay = 0.02
    emulator.script(Reply(text_tokens=60), Reply(text="Answer to the second."))
    async with telegram_gateway(
        home, emulator, emulator_url, gateway={"busy_policy": "interrupt"}
    ) as harness:
        lanes = type(harness.gateway.services.lanes)

        async def unreachable(self: Any, key: str) -> bool:
            await asyncio.sleep(60)
            return False

        monkeypatch.setattr(lanes, "cancel_running", unreachable)
        harness.fake.private_message(FRIEND, "a long question")
        await wait_for_requests(emulator, 1)
        harness.fake.private_message(FRIEND, "never mind, this instead")
        await harness.settled()
        answers = harness.texts(FRIEND)
    assert len(answers) == 2 and not answers[0].endswith("(stopped)")
    assert answers[1] == "Answer to the second."


async def test_stop_cancels_the_running_answer(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text_tokens=400))
    emulator.hold_streams()
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "tell me everything")
        await answering_half_way(harness)
        harness.fake.private_message(FRIEND, "/stop")
        await harness.settled()
        texts = harness.texts(FRIEND)
        harness.fake.private_message(FRIEND, "/stop")
        await harness.settled()
        again = harness.texts(FRIEND)[-1]
    assert "Stopped." in texts and any(t.endswith("(stopped)") for t in texts)
    assert again == "Nothing is running."


async def test_a_stop_whose_row_cannot_be_closed_is_still_a_stop_and_not_answered_later(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The database is away just as /stop closes the row: the turn stays stopped (the row stays pending
    for the restart to look at), it is not run again as if the database had interrupted it."""
    emulator.script(Reply(text_tokens=400), Reply(text="Answer to the next message."))
    emulator.hold_streams()
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        replies = harness.gateway.services.replies
        queue = replies.queue

        async def database_away_when_closing_as_cancelled(*args: Any, **kwargs: Any) -> list[int]:
            if kwargs.get("state") is InboxState.CANCELLED:
                raise StorageUnavailable("the database cannot be reached (test)")
            return await queue(*args, **kwargs)

        replies.queue = database_away_when_closing_as_cancelled  # type: ignore[method-assign]
        harness.fake.private_message(FRIEND, "tell me everything")
        await answering_half_way(harness)
        harness.fake.private_message(FRIEND, "/stop")
        await harness.fake.wait_for(lambda: "Stopped." in harness.texts(FRIEND), what="Stopped.")
        # The chat's next message is answered after anything still queued for it (a retry of the
        # stopped turn would ask the model again first).
        harness.fake.private_message(FRIEND, "next message")
        await harness.fake.wait_for(lambda: "Answer to the next message." in harness.texts(FRIEND))
    assert [last_user_text(r.json) for r in emulator.requests] == ["tell me everything", "next message"]


@pytest.mark.slow
async def test_session_hygiene_runs_before_the_turn_and_says_so_in_one_line(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=1200)
    sections: dict[str, Any] = {
        "model": {"context_length": 20_000, "max_tokens": 2000},
        "compression": {"threshold": 0.95, "protect_last_n": 2},
        "gateway": {"stream_edit_interval": 0},
    }
    async with telegram_gateway(home, emulator, emulator_url, **sections) as harness:
        for turn in range(16):
            harness.fake.private_message(FRIEND, f"FACT-{turn} " + "tell me more " * 20)
            await harness.settled()
            if any(t.startswith("ℹ️ Compressed") for t in harness.texts(FRIEND)):
                break
        notices = [t for t in harness.texts(FRIEND) if t.startswith("ℹ️")]
    assert len(notices) == 1 and "Compressed (summary)" in notices[0]


async def test_health_readiness_and_metrics(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "hello")
        await harness.settled()
        url = harness.gateway.http.url
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as client:
            async with client.get(f"{url}/healthz") as response:
                assert response.status == 200
            async with client.get(f"{url}/readyz") as response:
                ready = await response.json()
                assert response.status == 200 and ready == {"ready": True, "problems": []}
            async with client.get(f"{url}/metrics") as response:
                metrics = await response.text()
            await harness.gateway.adapters[0].stop_receiving()
            await harness.gateway.adapters[0].stop()
            async with client.get(f"{url}/readyz") as response:
                assert response.status == 503 and "telegram: not connected" in json.dumps(
                    await response.json()
                )
    assert 'gateway_messages_in_total{platform="telegram"} 1.0' in metrics
    assert 'gateway_turns_total{outcome="answered"} 1.0' in metrics
    assert (
        "gateway_turn_seconds_bucket" in metrics and 'gateway_provider_tokens_total{kind="output"}' in metrics
    )
    tasks = re.search(r"^gateway_asyncio_tasks ([0-9.]+)$", metrics, re.MULTILINE)
    assert tasks is not None and float(tasks.group(1)) >= 1  # this scrape's own handler, at least
    pooled = harness.gateway.services.runtime.storage.dialect == "postgresql"  # SQLite: no pool to count
    assert ("\ngateway_db_connections_out " in metrics) is pooled


async def test_the_command_menu_is_published_only_when_it_changed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    async with fake.serve() as base_url:
        config = gateway_config(emulator_url, base_url)
        for _ in range(2):  # two starts of the gateway on one home
            async with open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": fake.token}):
                pass
    assert len(fake.calls_to("setMyCommands")) == 1
    assert "help" in [command["command"] for command in fake.commands()]


async def test_an_admins_direct_chat_uses_the_owners_memory(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(ADMIN, "hi, it's me")
        harness.fake.private_message(FRIEND, "hi, it's Ada")
        await harness.settled()
        sessions = await harness.gateway.services.runtime.store.sessions.recent()
        locks = harness.gateway.services.runtime.locks
        lanes = harness.gateway.services.lanes
        idle = (lanes.active, getattr(locks, "active_keys", 0))
    scopes = {s.session_key: s.memory_scope for s in sessions}
    assert scopes == {f"telegram:dm:{ADMIN}": OWNER_SCOPE, f"telegram:dm:{FRIEND}": f"user:telegram:{FRIEND}"}
    assert idle == (0, 0)  # nothing per chat is held once its turn ended


async def test_webhook_mode_receives_updates_through_the_gateways_server(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    async with fake.serve() as base_url:
        config = gateway_config(
            emulator_url,
            base_url,
            telegram={"mode": "webhook", "webhook_url": "https://bot.example.org/telegram/webhook"},
        )
        async with open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": fake.token}) as gateway:
            assert fake.webhook_secret == webhook_secret(fake.token)
            update = fake.private_message(FRIEND, "via webhook")
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client:
                target = f"{gateway.http.url}/telegram/webhook"
                headers = {SECRET_HEADER: "wrong"}
                async with client.post(target, json=update, headers=headers) as response:
                    assert response.status == 403
                headers = {SECRET_HEADER: webhook_secret(fake.token)}
                async with client.post(target, json=update, headers=headers) as response:
                    assert response.status == 200
                async with client.post(target, json=update, headers=headers) as response:
                    assert response.status == 200  # a redelivery: stored once, answered once
            await fake.wait_for(lambda: [m for m in fake.messages(FRIEND) if m.text.startswith("Emulated")])
    assert len(emulator.requests) == 1


def inbound(text: str, message_id: str = "500") -> InboundMessage:
    return InboundMessage(
        platform="telegram",
        chat_id=str(FRIEND),
        chat_type=ChatType.DIRECT,
        user_id=str(FRIEND),
        user_name="Ada",
        message_id=message_id,
        text=text,
        timestamp=0.0,
        addressed=True,
    )


async def leave_a_crashed_turn(home: HeraldHome, config: HeraldConfig, *, finished: bool) -> None:
    """What a process killed during a turn leaves: the inbox row, and the turn (finished or not)."""
    message = inbound("what is two plus two?")
    async with open_agent_runtime(config, home) as runtime:
        row = await Inbox(runtime.storage).record(message, session_key(message))
        assert row is not None
        session = (await runtime.new_session(session_spec(message, is_admin=False))).record
        async with runtime.locks.hold(session.session_key) as lease:
            if finished:
                await runtime.agent.run_turn(lease, session, message.text, meta={"inbox": row.id})
                return
            provider = runtime.agent.provider_for(session)
            user = with_payload(provider, Message(role="user", content=message.text, meta={"inbox": row.id}))
            call = ToolCall("t1", "todo", "{}")
            await runtime.store.messages.append(
                session.id, [user, with_payload(provider, Message(role="assistant", tool_calls=(call,)))]
            )


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "cut-off"])
async def test_a_restart_delivers_a_finished_turn_and_redoes_a_cut_off_one(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, finished: bool
) -> None:
    fake = FakeTelegram()
    async with fake.serve() as base_url:
        config = gateway_config(emulator_url, base_url)
        fake.register_chat(FRIEND)
        if finished:
            emulator.script(Reply(text="Four."))
        await leave_a_crashed_turn(home, config, finished=finished)
        asked = len(emulator.requests)
        emulator.script(Reply(text="Four, again."))
        async with open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": fake.token}) as gateway:
            await fake.wait_for(lambda: fake.messages(FRIEND), what="the answer after the restart")
            await Harness(gateway, fake, emulator).settled()
            store = gateway.services.runtime.store
            [session] = await store.sessions.recent()
            history = await store.messages.load(session.id)
    texts = [m.text for m in fake.messages(FRIEND)]
    if finished:
        assert texts == ["Four."] and len(emulator.requests) == asked  # delivered, not asked again
        assert [m.role for m in history] == ["user", "assistant"]
    else:
        assert texts == ["Four, again."] and len(emulator.requests) == asked + 1
        assert [(m.role, m.content) for m in history] == [
            ("user", "what is two plus two?"),
            ("assistant", "Four, again."),
        ]  # the cut-off attempt left the conversation; the history stays valid


def test_gateway_run_without_any_platform_says_which_token_to_set(
    home: HeraldHome, herald: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    result = herald("gateway", "run", "-v")
    assert result.returncode == 2
    assert "No chat platform is enabled: set TELEGRAM_BOT_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_gateway_run_on_a_port_in_use_names_the_port_and_the_setting(
    home: HeraldHome, herald: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to say to check HERALD_HOME, which had nothing to do with it."""
    from gateway.config import set_value

    fake = FakeTelegram()
    with socket.socket() as taken, fake.serve_in_thread() as telegram_url:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        set_value(home.config_path, "telegram.base_url", telegram_url)
        set_value(home.config_path, "gateway.http_port", str(port))
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake.token)
        result = herald("gateway", "run")
        assert result.returncode == 2, result
        assert f"herald: the gateway's HTTP server cannot listen on 127.0.0.1:{port}: the port is in use" in (
            result.stderr
        )
        assert f"set gateway.http_port to a free port (`herald config set gateway.http_port {port + 1}`" in (
            result.stderr
        )
        assert "HERALD_HOME" not in result.stderr and "Traceback" not in result.stderr

        set_value(home.config_path, "gateway.http_host", "192.0.2.1")  # TEST-NET-1: nobody's address
        result = herald("gateway", "run")
        assert result.returncode == 2, result
        assert "cannot listen on 192.0.2.1:" in result.stderr and "set gateway.http_host" in result.stderr


def test_doctor_checks_each_platform_token_without_printing_it(
    home: HeraldHome, herald: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.config import set_value
    from tests.fakes import FakeDiscord

    telegram, discord = FakeTelegram(), FakeDiscord()
    with telegram.serve_in_thread() as telegram_url, discord.serve_in_thread() as discord_urls:
        set_value(home.config_path, "telegram.base_url", telegram_url)
        set_value(home.config_path, "discord.api_base", discord_urls.rest)
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", telegram.token)
        monkeypatch.setenv("DISCORD_BOT_TOKEN", "wrong.token")
        result = herald("doctor", "--offline")
        offline = result.stdout
        monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
        report = herald("doctor").stdout
    assert "[skip] telegram: token present; not checked (--offline)." in offline
    assert "[ok]   telegram: token accepted (bot @herald_bot)." in report
    assert "[FAIL] discord: refused DISCORD_BOT_TOKEN (HTTP 401)" in report
    assert telegram.token not in report and "wrong.token" not in report


async def test_a_bug_outside_the_agent_turn_gets_one_clear_line_and_is_not_retried(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        agent = harness.gateway.services.runtime.agent

        async def broken_hygiene(*args: Any) -> None:
            raise RuntimeError("a bug in hygiene")

        agent.hygiene = broken_hygiene  # type: ignore[method-assign,assignment]
        harness.fake.private_message(FRIEND, "hello?")
        await harness.settled()
        answers = harness.texts(FRIEND)
        still_pending = await harness.gateway.services.inbox.pending()
    assert answers == [
        "⚠️ No answer: something went wrong on our side (the details are in the gateway's log)."
    ]
    assert still_pending == [] and emulator.requests == []
    assert "a bug in hygiene" in caplog.text  # the traceback is in the log, for the operator


async def test_someone_taken_off_the_admins_no_longer_reads_the_owners_memory(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    await put_memory(home, "The owner's PIN is OWNER-SECRET-4711.\n")
    fake = FakeTelegram()
    as_admin = {"admins": [f"telegram:{FRIEND}"]}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=as_admin) as harness:
        fake.private_message(FRIEND, "hello as an admin")
        await harness.settled()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:  # FRIEND demoted
        fake.private_message(FRIEND, "hello again")
        await harness.settled()
    admin_request, demoted_request = emulator.requests
    assert "OWNER-SECRET-4711" in json.dumps(admin_request.json["system"])
    assert "OWNER-SECRET-4711" not in json.dumps(demoted_request.json)
