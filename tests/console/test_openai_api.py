"""The OpenAI-compatible API end to end: the real ``openai`` SDK as the client, a gateway serving the API
(and nothing else), the provider emulator as the model behind it.

What a client of the API should notice: a conversation it sends again and again is one Herald session
whose prompt the provider's cache keeps serving; streaming works as OpenAI's does; keys decide who may
talk and whose memory, limits and rights apply; an edited history branches without touching what was
stored; a client that hangs up stops its turn cleanly.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import aiohttp
import openai
import pytest
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionUserMessageParam,
)

from agent.memory import OWNER_SCOPE, user_scope
from agent.side import REVIEW_TASK
from gateway.app import open_gateway
from gateway.console.links import LoginLinks
from gateway.home import HeraldHome
from tests.console.test_console_sources import row_of
from tests.console_support import console_client
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.fakes.waiting import wait_until
from tests.openai_api_support import ADMIN, PEOPLE, ApiHarness, api_config, api_gateway
from tests.spend_support import crossing, dollars

pytestmark = pytest.mark.timeout(120)

QUESTION = "please go through the next part of the plan and tell me what could go wrong there, " * 4
MODEL = "herald"


Messages = list[ChatCompletionMessageParam]


def user(text: str) -> ChatCompletionMessageParam:
    said: ChatCompletionUserMessageParam = {"role": "user", "content": text}
    return said


def assistant(text: str) -> ChatCompletionMessageParam:
    answered: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": text}
    return answered


def system(text: str) -> ChatCompletionMessageParam:
    return {"role": "system", "content": text}


def said(messages: Sequence[ChatCompletionMessageParam]) -> list[tuple[str, str]]:
    """(role, text) of each message, as Herald keeps it (texts stripped)."""
    return [(m["role"], str(m.get("content", "")).strip()) for m in messages]


async def ask(
    client: openai.AsyncOpenAI, messages: Sequence[ChatCompletionMessageParam], **options: Any
) -> str:
    """The answer text of one request (not streamed)."""
    answer = await client.chat.completions.create(
        model=MODEL, messages=list(messages), stream=False, **options
    )
    content = answer.choices[0].message.content
    assert isinstance(content, str)
    return content


async def ask_streaming(client: openai.AsyncOpenAI, messages: Sequence[ChatCompletionMessageParam]) -> str:
    stream = await client.chat.completions.create(model=MODEL, messages=list(messages), stream=True)
    parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    return "".join(parts)


async def test_a_twenty_turn_conversation_is_one_session_whose_prefix_the_cache_keeps_serving(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url, review={"enabled": False}) as api:
        client = api.client("alice")
        messages: Messages = [system("Answer like a careful reviewer.")]
        for turn in range(20):
            messages.append(user(f"Turn {turn}: {QUESTION}"))
            streamed = turn % 2 == 1  # the client streams every other answer: both kinds continue it
            text = await (ask_streaming(client, messages) if streamed else ask(client, messages))
            messages.append(assistant(text))

        [session] = await api.sessions("alice")
        assert await api.history(session) == said(messages[1:])
        assert "Answer like a careful reviewer." in session.system_prompt.context
        sent = [r for r in emulator.requests if r.ok]
        assert len(sent) == 20
        assert len({r.system_json for r in sent}) == 1  # one prompt, sent byte for byte every time
        assert len({r.tools_json for r in sent}) == 1
        oracle = sum(r.oracle_tokens for r in sent)
        read = sum(r.cache_read for r in sent)
        assert oracle > 20_000, "the conversation must be long enough for the cache to matter"
        assert read / oracle >= 0.995, f"cache efficiency {read / oracle:.4f}"


async def test_streaming_sends_the_answer_in_chunks_and_a_last_chunk_with_the_usage(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text_tokens=120), Reply(text_tokens=120))
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        hello: Messages = [user("hello")]
        stream = await client.chat.completions.create(
            model=MODEL, messages=hello, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert len(texts) > 3, "the answer arrives as it is written, in several chunks"
        assert "".join(texts) == emulator.requests[-1].reply_text
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        last = chunks[-1]
        assert last.choices == [] and last.usage is not None
        assert last.usage.prompt_tokens == emulator.requests[-1].prompt_tokens
        assert last.usage.completion_tokens == emulator.requests[-1].output_tokens
        assert all(c.usage is None for c in chunks[:-1])

        again: Messages = [user("again")]
        stream = await client.chat.completions.create(model=MODEL, messages=again, stream=True)
        plain = [chunk async for chunk in stream]
        assert plain and all(c.choices and c.usage is None for c in plain)  # no usage chunk unless asked


async def test_a_wrong_or_missing_key_is_refused_with_401_and_reaches_no_model(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url) as api:
        wrong = api.client(key="sk-not-a-key-of-this-herald")
        with pytest.raises(openai.AuthenticationError) as refused:
            await ask(wrong, [user("hello")])
        assert refused.value.status_code == 401
        assert refused.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            await wrong.models.list()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                api.url + "/chat/completions", json={"model": MODEL, "messages": [user("hi")]}
            ) as response,
        ):
            assert response.status == 401
            body = await response.json()
            assert "Authorization: Bearer" in body["error"]["message"]
        assert emulator.requests == []
        models = await api.client("bob").models.list()
        assert [model.id for model in models.data] == [MODEL]


async def test_a_keys_spend_limit_refuses_with_429_a_request_that_would_cross_it(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    budgets = {"overrides": {PEOPLE["bob"][0]: {"daily_usd": 0.01}}}  # room for a turn or two
    model = {"max_tokens": 100}  # an answer is estimated at 100 output tokens before it is sent
    async with api_gateway(home, emulator, emulator_url, budgets=budgets, model=model) as api:
        bob = api.client("bob", max_retries=2)  # the SDK would retry a plain 429: this one says not to
        messages = [user("hello")]
        with pytest.raises(openai.RateLimitError) as refused:
            for turn in range(10):
                asked = len(emulator.requests)
                messages += [assistant(await ask(bob, messages)), user(f"and again {turn}")]
        assert refused.value.status_code == 429 and asked >= 1
        told = crossing(refused.value.message.removeprefix("Error code: 429 - "))
        assert (told["who"], told["limit"]) == ("You have", "$0.01")
        assert dollars(told["needed"]) > dollars(told["left"]) > 0 and dollars(told["spent"]) > 0
        assert refused.value.response.headers["x-should-retry"] == "false"
        assert "Retry-After" not in refused.value.response.headers  # a smaller request may fit now
        assert len(emulator.requests) == asked, "a refused request reaches no model (and is not retried)"
        assert await ask(api.client("alice"), [user("hello")])  # alice has no such limit


async def test_an_edited_earlier_message_starts_a_branch_and_leaves_the_stored_history_as_it_was(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        messages = [user("first question")]
        for question in ("second question", "third question"):
            messages += [assistant(await ask(client, messages)), user(question)]
        messages.append(assistant(await ask(client, messages)))
        [original] = await api.sessions("alice")
        stored = await api.history(original)
        assert len(stored) == 6

        edited = [user("first question, asked differently"), *messages[1:4], user("a new fourth")]
        branch_answer = await ask(client, edited)

        original_now, branch = await api.sessions("alice")
        assert original_now.id == original.id
        assert await api.history(original) == stored  # never rewritten
        assert await api.history(branch) == [*said(edited), ("assistant", branch_answer)]
        # going back to the original line continues it, not the branch
        await ask(client, [*messages, user("back on the first line")])
        assert len(await api.sessions("alice")) == 2
        assert (await api.history(original))[-2:][0] == ("user", "back on the first line")


async def test_two_keys_conversations_never_mix_even_with_the_same_words(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(*(Reply(text="The same answer.") for _ in range(4)))
    async with api_gateway(home, emulator, emulator_url) as api:
        conversation = [user("my secret is tangerine")]
        for who in ("alice", "bob"):
            assert await ask(api.client(who), conversation) == "The same answer."
        conversation += [assistant("The same answer."), user("what did I say?")]
        for who in ("alice", "bob"):
            await ask(api.client(who), conversation)

        [alice], [bob] = await api.sessions("alice"), await api.sessions("bob")
        assert alice.id != bob.id  # each continued their own conversation, never the other's
        assert alice.memory_scope == user_scope("api", "alice")
        assert bob.memory_scope == user_scope("api", "bob")
        assert await api.history(alice) == await api.history(bob)  # the same words, kept apart
        assert len(await api.history(alice)) == 4


async def test_the_console_lists_each_api_conversation_by_the_person_its_key_acts_for(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """Not by its session key's random hex (api:conversation:3f1c...), on the chat list and its page."""
    emulator.script(*(Reply(text="Noted.") for _ in range(2)))
    async with api_gateway(home, emulator, emulator_url) as api:
        for who in ("alice", "bob"):
            await ask(api.client(who), [user(f"{who} here: plan my week")])
        keys = {PEOPLE[who][0]: (await api.sessions(who))[0].session_key for who in ("alice", "bob")}
        secret = await LoginLinks(api.gateway.services.runtime.storage).issue(ADMIN)
        async with console_client(api.gateway.http.url) as console:
            await console.login_with_link(secret)
            chats = (await console.get("/console/chats"))[1]
            pages = {who: (await console.get(f"/console/chat?key={key}"))[1] for who, key in keys.items()}
    for person, key in keys.items():
        name = re.search(r'<a class="name" href="[^"]*">([^<]*)</a>', row_of(chats, f'data-key="{key}"'))
        assert name is not None and name.group(1) == person
        assert f'<h1 class="name">{person}</h1>' in pages[person]


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_client_that_hangs_up_mid_answer_stops_its_turn_and_the_conversation_goes_on(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, streaming: bool
) -> None:
    emulator.script(Reply(text="Hello."), Reply(text_tokens=400))
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        history: Messages = [
            user("hello"),
            assistant(await ask(client, [user("hello")])),
            user("a long story"),
        ]
        [session] = await api.sessions("alice")
        before = await api.history(session)
        spent_before = session.output_tokens

        emulator.hold_streams()  # the story stops half-way, until its client hangs up
        if streaming:
            stream = await client.chat.completions.create(model=MODEL, messages=history, stream=True)
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break  # the story has begun: hang up
            await stream.close()
        else:
            waiting = asyncio.create_task(ask(client, history))
            await wait_until(lambda: emulator.holding == 1, what="the answer to be half-way")
            waiting.cancel()  # the client gives up waiting, and hangs up
            with pytest.raises(asyncio.CancelledError):
                await waiting

        await wait_until(lambda: cancelled(api) == 1, what="the turn to be stopped")
        assert await api.history(session) == before  # the unanswered turn left the conversation
        recorded = await api.gateway.services.runtime.store.sessions.get(session.id)
        assert recorded is not None and recorded.output_tokens > spent_before  # the stopped answer counts

        again = await ask(client, history)  # the client asks again: the same session goes on
        assert again
        assert [s.id for s in await api.sessions("alice")] == [session.id]
        assert await api.history(session) == [*before, ("user", "a long story"), ("assistant", again)]


def cancelled(api: ApiHarness) -> float:
    """Turns stopped so far, as /metrics counts them."""
    found = api.gateway.services.metrics.registry.get_sample_value(
        "gateway_turns_total", {"outcome": "cancelled"}
    )
    return found or 0.0


async def test_what_the_api_cannot_do_is_refused_with_400_in_openais_format(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url, api={"max_request_mb": 0.01}) as api:
        client = api.client("alice")
        tools = [{"type": "function", "function": {"name": "f"}}]
        image = [{"type": "image_url", "image_url": {"url": "x"}}]
        late_system = {"role": "system", "content": "be brief"}
        refusals: list[tuple[dict[str, Any], str]] = [
            ({"messages": [user("hi")], "tools": tools}, "own tools"),
            ({"messages": [user("hi")], "n": 2}, "one answer"),
            ({"messages": [user("hi"), assistant("hello")]}, "last message must be the person's"),
            ({"messages": [user("hi"), late_system, user("so?")]}, "come first"),
            ({"messages": [{"role": "user", "content": image}]}, "text only"),
            ({"messages": [user("hi")], "response_format": {"type": "json_object"}}, "response format"),
        ]  # fmt: skip
        for body, says in refusals:
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(model=MODEL, **body)
            assert refused.value.status_code == 400
            assert says in refused.value.message
            assert refused.value.type == "invalid_request_error"
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="gpt-4o", messages=[user("hi")])
        assert unknown.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as too_big:
            await ask(client, [user("x" * 20_000)])
        assert "larger than 0.01 MB (api.max_request_mb)" in too_big.value.message

        status, body = await api.post("{not json")
        assert status == 400 and "not valid JSON" in body["error"]["message"]
        status, body = await api.post('{"model": "herald", "messages": [], "temprature": 0.2}')
        assert status == 400 and body["error"]["param"] == "temprature"
        status, body = await api.post("{}", path="/completions")
        assert status == 404 and "/v1/chat/completions" in body["error"]["message"]
        assert emulator.requests == []  # nothing refused reached a model

        ignored = {"temperature": 0.2, "max_tokens": 50, "user": "someone", "stop": ["\n\n"], "seed": 1}
        assert await ask(client, [user("hi")], **ignored)  # sampling settings are accepted and ignored


async def test_the_clients_system_message_is_kept_in_the_prompt_and_a_new_one_starts_a_new_session(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        brief: Messages = [system("Answer in French."), user("hello")]
        first = await ask(client, brief)
        await ask(client, [*brief, assistant(first), user("and then?")])
        [session] = await api.sessions("alice")
        assert "Answer in French." in session.system_prompt.context
        assert "Answer in French." not in session.system_prompt.stable  # the shared layer stays shared

        changed: Messages = [system("Answer in German."), user("hello"), assistant(first), user("and?")]
        await ask(client, changed)
        sessions = await api.sessions("alice")
        assert len(sessions) == 2
        assert "Answer in German." in sessions[1].system_prompt.context
        assert sessions[0].system_prompt.stable == sessions[1].system_prompt.stable


async def test_a_conversation_id_keeps_conversations_with_the_same_words_apart(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(*(Reply(text="Hi there.") for _ in range(8)))
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        start = [user("hello")]
        later = [user("hello"), assistant("Hi there."), user("how are you?")]
        for conversation in ("one", "two"):
            await ask(client, start, extra_headers={"X-Herald-Conversation": conversation})
        for conversation in ("one", "two"):
            await ask(client, later, extra_headers={"X-Herald-Conversation": conversation})
        assert len(await api.sessions("alice")) == 2  # each id went on with its own session

        await ask(client, start, metadata={"conversation_id": "three"})
        await ask(client, later, metadata={"conversation_id": "three"})
        await ask(client, start, extra_headers={"X-OpenWebUI-Chat-Id": "four"})
        await ask(client, later, extra_headers={"X-OpenWebUI-Chat-Id": "four"})
        sessions = await api.sessions("alice")
        assert len(sessions) == 4
        assert [len(await api.history(session)) for session in sessions] == [4, 4, 4, 4]


async def test_keys_give_their_persons_memory_and_rights(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url, gateway={"tools_for_guests": ["todo"]}) as api:
        await ask(api.client("owner"), [user("hello")])
        await ask(api.client("alice"), [user("hello")])
        [owner], [alice] = await api.sessions("owner"), await api.sessions("alice")
        assert owner.memory_scope == OWNER_SCOPE  # api:owner is in gateway.admins
        assert alice.memory_scope == user_scope("api", "alice")
        assert {tool["name"] for tool in alice.tools} == {"todo"}
        assert {"memory", "todo", "session_search"} <= {tool["name"] for tool in owner.tools}


async def test_a_key_for_a_person_of_another_platform_has_exactly_their_access(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    key = "telegram-friend-key-0123456789"
    sections: dict[str, Any] = {"api": {"keys": [{"key": "$FRIEND_KEY", "person": "telegram:2"}]}}
    for allowed in (False, True):
        telegram = {"allowed_users": ["2"] if allowed else []}
        config = api_config(emulator_url, people=(), telegram=telegram, **sections)
        async with (
            open_gateway(config, home, environ={"FRIEND_KEY": key}) as gateway,
            openai.AsyncOpenAI(base_url=gateway.http.url + "/v1", api_key=key, max_retries=0) as client,
        ):
            if not allowed:
                with pytest.raises(openai.PermissionDeniedError) as refused:
                    await ask(client, [user("hello")])
                assert "telegram:2" in refused.value.message
                assert emulator.requests == []
                continue
            assert await ask(client, [user("hello")])
            [session] = [
                s for s in await gateway.services.runtime.store.sessions.recent() if s.platform == "api"
            ]
            assert session.memory_scope == user_scope("telegram", "2")  # the memory of their Telegram chats


async def test_tools_run_on_the_server_and_the_client_gets_the_answer_text(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    todos = {"todos": [{"id": "1", "content": "water the plants", "status": "pending"}], "merge": True}
    emulator.script(
        Reply(text="I'll note that.", tool_calls=[ToolUse("todo", todos)]),
        Reply(text="Noted: water the plants."),
        Reply(text="Done."),
    )
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("owner")
        first = [user("remind me to water the plants")]
        answer = await ask_streaming(client, first)
        assert answer == "I'll note that.\n\nNoted: water the plants."
        await ask(client, [*first, assistant(answer), user("thanks")])
        [session] = await api.sessions("owner")  # the tool steps stay on the server: the history matched
        roles = [role for role, _ in await api.history(session)]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert await api.gateway.services.runtime.store.sessions.todos(session.id)


async def test_a_request_sent_the_moment_the_answer_ends_continues_the_same_session(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        messages: Messages = [user("turn 0")]
        stream = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
        for turn in range(1, 16):
            parts: list[str] = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                if chunk.choices and chunk.choices[0].finish_reason == "stop":
                    break  # the answer is complete: ask the next question before the stream's last bytes
            messages += [assistant("".join(parts)), user(f"turn {turn}")]
            following = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
            await stream.close()
            stream = following
        _ = [chunk async for chunk in stream]
        [session] = await api.sessions("alice")  # every request found the conversation it continues
        assert len(await api.history(session)) == 32


async def test_two_requests_of_one_history_at_once_take_turns_and_the_second_branches(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        start = [user("hello")]
        history = [*start, assistant(await ask(client, start)), user("go on")]
        emulator.stream_delay = 0.01
        answers = await asyncio.gather(ask(client, history), ask(client, history))
        assert all(answers)
        assert emulator.max_in_flight == 1  # never two turns of one session at once
        first, second = await api.sessions("alice")
        assert len(await api.history(first)) == len(await api.history(second)) == 4


async def test_a_shutdown_stops_a_running_turn_and_tells_its_client(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text_tokens=400))
    emulator.hold_streams()  # the story stops half-way: it is surely running when the gateway stops
    async with api_gateway(home, emulator, emulator_url, gateway={"drain_timeout": 0.2}) as api:
        client = api.client("alice")
        stream = await client.chat.completions.create(
            model=MODEL, messages=[user("a long story")], stream=True
        )
        got: list[str] = []
        with pytest.raises(openai.APIError) as stopped:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    got.append(chunk.choices[0].delta.content)
                    if len(got) == 1:
                        asyncio.get_running_loop().create_task(api.gateway.drain())
        assert "shutting down" in stopped.value.message
        [session] = await api.sessions("alice")
        assert await api.history(session) == []  # the stopped turn is out of the conversation
        with pytest.raises(openai.InternalServerError) as refused:
            await ask(client, [user("hello")])
        assert refused.value.status_code == 503


def tool_names(request: RecordedRequest) -> list[str]:
    return [tool["name"] for tool in request.json.get("tools", [])]


async def test_a_message_past_the_models_context_window_is_refused_with_400_before_any_model_call(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """A 1.2 MB message is about 300,000 tokens: no model of a 200,000-token window could take it, and
    compression shortens a history, never the message itself. OpenAI's own error, and nothing sent."""
    huge = "The logs of last night, line after line, every request and its answer. " * 17_000
    async with api_gateway(home, emulator, emulator_url) as api:
        client = api.client("alice")
        with pytest.raises(openai.BadRequestError) as refused:
            await ask(client, [user(huge)])
        answer = await ask(client, [user("hello")])
        asked = len(emulator.requests)
        with pytest.raises(openai.BadRequestError) as refused_later:  # in a conversation going on
            await ask(client, [user("hello"), assistant(answer), user(huge)])
        after = await ask(client, [user("hello"), assistant(answer), user("a short one then")])
    for error in (refused.value, refused_later.value):
        assert error.status_code == 400 and error.code == "context_length_exceeded"
        assert error.type == "invalid_request_error" and error.param == "messages"
        assert "maximum context length is 200,000 tokens" in error.message
    assert asked == 1 and after  # the first refusal reached no model, and neither did the second
    assert len(emulator.requests) == 2 and all(len(r.body) < 100_000 for r in emulator.requests)


async def test_an_api_guest_is_offered_no_cron_tool_and_the_owner_keeps_it_in_a_frozen_list(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """A guest's job posts only into the chat it was made in, and an API conversation is no chat: the
    tool could never succeed for them, so it is not in their list. The owner names a target chat. Each
    list is fixed when the conversation starts, and sent byte for byte on every later turn."""
    async with api_gateway(home, emulator, emulator_url, review={"enabled": False}) as api:
        guest, owner = api.client("alice"), api.client("owner")
        first = await ask(guest, [user("remind me of the dentist every monday")])
        await ask(guest, [user("remind me of the dentist every monday"), assistant(first), user("and?")])
        await ask(owner, [user("what can you schedule?")])
    guest_turns, owner_turn = emulator.requests[:2], emulator.requests[2]
    assert "cron" not in tool_names(guest_turns[0]) and "memory" in tool_names(guest_turns[0])
    assert guest_turns[0].tools_json == guest_turns[1].tools_json  # the frozen list, on every turn
    assert "cron" in tool_names(owner_turn)
    assert "cron" not in guest_turns[0].system_json  # nor its guidance in the prompt


async def test_an_imported_history_starts_no_review_and_the_turns_answered_here_do(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """A client brings 20 turns Herald never answered: they are not 20 turns to review at once. Reviews
    count the turns answered here (``review.every_turns``: 3)."""
    imported: Messages = []
    for turn in range(20):
        imported += [user(f"earlier question {turn}"), assistant(f"earlier answer {turn}")]
    async with api_gateway(home, emulator, emulator_url, review={"every_turns": 3}) as api:
        client = api.client("alice")
        messages = [*imported, user("the first question here")]
        messages.append(assistant(await ask(client, messages)))
        [session] = await api.sessions("alice")
        store = api.gateway.services.runtime.store
        unreviewed = await store.reviews.turns_since_review(session.id)
        for number in range(2):
            messages.append(user(f"question {number} here"))
            messages.append(assistant(await ask(client, messages)))
        reviewed = await wait_until(
            lambda: [r for r in emulator.requests if REVIEW_TASK in json.dumps(r.json["messages"][-1])],
            what="a review after three answered turns",
        )
        await wait_until(lambda: api.gateway.services.reviews.running == 0, what="the review done")
    assert unreviewed == 1  # the one turn answered here; the imported ones are not counted
    before = emulator.requests[: emulator.requests.index(reviewed[0])]
    assert len(before) == 3  # the first review came after the third turn answered here
