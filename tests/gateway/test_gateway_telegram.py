"""The gateway on Telegram, end to end: real python-telegram-bot, fake Bot API, real SDK, emulator."""

from __future__ import annotations

import json

import pytest

from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import ADMIN, FRIEND, STRANGER, telegram_gateway
from tests.helpers import prompt_hashes

LONG_ANSWER = "\n\n".join(
    f"## Part {n}\n\n" + "Some explanation of the step. " * 40 + f"\n\n```python\ndef step_{n}():\n"
    + "    return compute(value) + 1\n" * 30 + "```"
    for n in range(6)
)  # fmt: skip


def user_messages(request_json: dict) -> list[str]:
    return [
        block["text"]
        for message in request_json["messages"]
        if message["role"] == "user"
        for block in message["content"]
        if block.get("type") == "text"
    ]


async def test_a_direct_message_is_answered_by_streaming_into_one_message(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="**Hello** Ada, " + "here is a longer answer. " * 30))
    emulator.hold_streams()  # half the answer is shown before the rest arrives
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "Hi there", first_name="Ada")
        await harness.fake.wait_for(lambda: emulator.holding and harness.visible(FRIEND), what="half")
        emulator.release_streams()
        await harness.settled()
        [answer] = harness.visible(FRIEND)
        typing = harness.fake.typing_actions(FRIEND)
    assert answer.text.startswith("Hello Ada, here is a longer answer.")
    assert {"type": "bold", "offset": 0, "length": 5} in answer.entities
    assert len(answer.versions) >= 2  # streamed: edited as the text arrived
    assert typing
    assert user_messages(emulator.requests[-1].json) == ["Hi there"]


async def test_a_streamed_message_that_already_shows_the_answer_is_not_edited_again(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """A quick answer is shown whole by its first streamed send: the final edit would change nothing
    and cost a paced API call, so none is made (Telegram would answer "message is not modified")."""
    emulator.script(Reply(text="Hello."))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "Hi there")
        await harness.settled()
        [answer] = harness.visible(FRIEND)
    assert answer.text == "Hello."
    assert harness.fake.calls_to("sendMessage") and not harness.fake.calls_to("editMessageText")


async def test_strangers_get_a_pairing_code_and_cost_nothing_until_approved(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        fake.private_message(STRANGER, "let me in", first_name="Eve")
        fake.private_message(STRANGER, "hello??", first_name="Eve")
        fake.group_message(-100, STRANGER, "hey bot", mention_bot=True)
        await harness.settled()
        [code_reply] = harness.texts(STRANGER)  # one code, no reply to the second message
        assert harness.texts(-100) == []  # in groups strangers are ignored silently
        assert emulator.requests == []
        code = code_reply.split("valid for an hour): ")[1].split()[0]

        fake.private_message(FRIEND, f"/approve {code}")  # not an admin
        fake.private_message(ADMIN, f"/approve {code}")
        await harness.settled()
        assert harness.texts(FRIEND)[-1] == "Only an admin can use /approve."
        assert "Approved Eve" in harness.texts(ADMIN)[-1]
        assert "approved your access" in harness.texts(STRANGER)[-1]

        fake.private_message(STRANGER, "thanks!")
        await harness.settled()
    assert len(emulator.requests) == 1 and user_messages(emulator.requests[0].json) == ["thanks!"]


async def test_groups_answer_when_addressed_name_the_speaker_and_share_the_prompt_prefix(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        fake.group_message(-100, FRIEND, "just chatting among ourselves", title="Ops")
        fake.group_message(-100, FRIEND, "what is the plan?", mention_bot=True, first_name="Ada", title="Ops")
        fake.group_message(-200, ADMIN, "/help", command=True, title="Dev")
        fake.group_message(-200, ADMIN, "status please", mention_bot=True, first_name="Bob", title="Dev")
        await harness.settled()
        ops = harness.visible(-100)
        bot_message = ops[0].message_id
        fake.group_message(-100, FRIEND, "and then?", reply_to_bot_message_id=bot_message, first_name="Ada")
        await harness.settled()
    assert len(emulator.requests) == 3  # the unaddressed message and /help reached no model
    # The two groups' first turns run at once, so which request came first is not fixed: name them.
    ops_first, dev_first, ops_second = (
        next(r for r in emulator.requests if user_messages(r.json)[-1].endswith(ending))
        for ending in ("what is the plan?", "status please", "and then?")
    )
    first, second, third = ops_first.json, dev_first.json, ops_second.json
    assert user_messages(first) == ["Ada: @herald_bot what is the plan?"]
    assert user_messages(second) == ["Bob: @herald_bot status please"]
    assert user_messages(third)[-1] == "Ada: and then?"
    assert "Ops" in json.dumps(first["system"]) and "Dev" in json.dumps(second["system"])
    # Tools + stable + context layers are identical across chats: a new chat reads them from cache.
    assert first["tools"] == second["tools"] and first["system"][:-1] == second["system"][:-1]
    assert len(prompt_hashes([ops_first, ops_second])) == 1
    assert ops[0].reply_to_message_id is not None


async def test_forum_topics_are_sessions_of_their_own_and_replies_stay_in_the_topic(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        fake.group_message(-300, FRIEND, "topic one question", mention_bot=True, is_forum=True, thread_id=11)
        fake.group_message(-300, FRIEND, "topic two question", mention_bot=True, is_forum=True, thread_id=22)
        await harness.settled()
        assert len(harness.texts(-300, 11)) == 1 and len(harness.texts(-300, 22)) == 1
        sessions = await harness.gateway.services.runtime.store.sessions.recent()
    assert sorted(s.session_key for s in sessions) == [
        "telegram:group:-300:topic:11",
        "telegram:group:-300:topic:22",
    ]


async def test_a_redelivered_update_is_answered_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        update = harness.fake.private_message(FRIEND, "only once please")
        await harness.settled()
        harness.fake.redeliver(update["update_id"])
        await harness.settled()
        assert len(harness.texts(FRIEND)) == 1
    assert len(emulator.requests) == 1


async def test_a_429_and_a_formatting_refusal_still_deliver_the_answer(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    emulator.script(Reply(text="**bold** answer"), Reply(text="second answer"))
    async with telegram_gateway(home, emulator, emulator_url, gateway={"stream_edit_interval": 0}) as harness:
        harness.fake.reject_formatting_next()
        harness.fake.private_message(FRIEND, "one")
        await harness.settled()
        harness.fake.fail_next("sendMessage", 429, retry_after=1)
        harness.fake.private_message(FRIEND, "two")
        await harness.settled()
        answers = harness.visible(FRIEND)
    assert [m.text for m in answers] == ["bold answer", "second answer"]
    assert answers[0].entities == []  # resent as plain text


async def test_a_long_answer_with_code_is_split_within_the_limit_and_keeps_its_code_blocks(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text=LONG_ANSWER))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "explain everything")
        await harness.settled()
        parts = harness.visible(FRIEND)
    assert len(LONG_ANSWER) > 10_000 and len(parts) >= 3
    assert all(len(p.text.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    assert all(any(e["type"] == "pre" and e.get("language") == "python" for e in p.entities) for p in parts)
    joined = "".join(p.text for p in parts)
    assert "def step_0():" in joined and "def step_5():" in joined


async def test_commands_answer_without_reaching_the_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        fake.private_message(FRIEND, "first message")
        await harness.settled()
        for command in (
            "/help",
            "/status",
            "/memory",
            "/insights",
            "/model claude-haiku-4-5",
            "/bogus",
            "/new",
        ):
            fake.private_message(FRIEND, command)
            await harness.settled()
        fake.private_message(FRIEND, "/etc/hosts is broken")  # not a command: goes to the model
        await harness.settled()
        replies = harness.texts(FRIEND)
        menus = len(fake.calls_to("setMyCommands"))
    assert len(emulator.requests) == 2
    assert user_messages(emulator.requests[-1].json) == ["/etc/hosts is broken"]
    assert emulator.requests[-1].model == "claude-haiku-4-5"  # /model applied to the session /new started
    assert replies[1].startswith("Commands:") and "/approve" not in replies[1]
    assert "claude-sonnet-4-6" in replies[2]
    assert replies[6] == "Unknown command /bogus. Type /help for the list."
    assert "claude-haiku-4-5" in replies[5] and replies[7].startswith(
        "New session started on claude-haiku-4-5"
    )
    assert menus == 1


async def test_an_answer_cut_off_at_the_token_limit_says_so_in_the_chat(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="word " * 200), Reply(text="more " * 200))
    async with telegram_gateway(home, emulator, emulator_url, model={"max_tokens": 50}) as harness:
        harness.fake.private_message(FRIEND, "tell me everything")
        await harness.settled()
        [answer] = harness.texts(FRIEND)
    assert "cut off at the model.max_tokens limit of 50 tokens" in answer


async def test_insights_tables_arrive_as_preformatted_text_without_headings(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Before, each table's header line, with the line of dashes under it, became a heading (bold,
    underlined, with a pencil) and the columns lost their alignment."""
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "Hello there")
        await harness.settled()
        harness.fake.private_message(FRIEND, "/insights")
        await harness.settled()
        [report] = harness.visible(FRIEND)[1:]
    kinds = {entity["type"] for entity in report.entities}
    assert kinds == {"pre"}  # no bold, no underline: no heading anywhere
    assert "✏" not in report.text
    for header in ("session ", "by purpose "):
        start = report.text.index(header)
        dashes = report.text.index("-" * 40, start)  # the line under it, shown as it is
        assert any(e["offset"] <= start and dashes < e["offset"] + e["length"] for e in report.entities), (
            header
        )  # the header line and the line under it are inside one pre block
    assert "Hello there" in report.text and "main turns (1 requests)" in report.text


async def test_html_in_an_answer_and_in_a_command_arrives_as_written(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Before, Telegram showed ``List<String>`` as "List", ``<script>alert(1)</script>`` in a sentence as
    "alert(1)" and ``&amp;`` as "&", while streaming and in the final answer; ``/model <img …>`` was
    answered "'' is not a model name"."""
    answer = (
        "Use List<String> or <br> as you like; a `Map<K, V>` too. Never <script>alert(1)</script>; "
        "write &amp; for &. " + "More about generics follows here. " * 20
    )
    shown = answer.replace("`", "").strip()  # the backticks are formatting: the code span's entity
    model_name = "<img src=x onerror=alert(1)>"
    emulator.script(Reply(text=answer))
    emulator.hold_streams()
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "generics in Java?")
        await harness.fake.wait_for(lambda: emulator.holding and harness.visible(FRIEND), what="half")
        emulator.release_streams()
        await harness.settled()
        harness.fake.private_message(FRIEND, f"/model {model_name}")
        await harness.settled()
        [reply, model_reply] = harness.visible(FRIEND)
    assert reply.text == shown
    assert {"type": "code", "offset": shown.index("Map<"), "length": len("Map<K, V>")} in reply.entities
    streamed = reply.versions[:-1]  # what the person saw while the answer arrived
    assert streamed and all(shown.startswith(version.replace("`", "").strip()) for version in streamed)
    assert any("List<String>" in version for version in streamed)
    assert model_reply.text.startswith(f"'{model_name}' is not a model name.")
