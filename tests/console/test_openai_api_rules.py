"""The OpenAI-compatible API's rules, without I/O: how a request is read, how a history is recognised
again, what text a client gets from a turn's events, how keys are configured and checked."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.api import Retrying, TextDelta, ToolFinished, ToolStarted, TurnEvent, TurnResult, Usage
from gateway.config import ConfigError, HeraldConfig, validate
from gateway.home import HeraldHome
from gateway.openai_api.answering import AnswerText
from gateway.openai_api.keys import key_ring
from gateway.openai_api.transcript import Turn, digest, joined
from gateway.openai_api.wire import ApiError, Chunks, parse_request, usage_body

MODEL = "herald"


def request(**fields: Any) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def refusal(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as refused:
        parse_request(body, MODEL)
    return refused.value


def test_a_history_is_recognised_whatever_its_whitespace_and_message_splits() -> None:
    plain = [Turn("user", "hello"), Turn("assistant", "Hi!"), Turn("user", "how are you?")]
    messy = [
        Turn("user", "  hello\n"),
        Turn("assistant", ""),  # an empty message (a failed answer the client kept) is nothing
        Turn("assistant", "Hi!  "),
        Turn("user", "how are you?"),
    ]
    assert joined(messy) == tuple(plain)
    assert digest("be brief", joined(messy)) == digest("be brief", plain)
    split = [Turn("user", "hello"), Turn("user", "are you there?")]
    assert joined(split) == (Turn("user", "hello\n\nare you there?"),)


def test_a_different_system_message_or_an_edited_turn_is_another_history() -> None:
    history = (Turn("user", "hello"), Turn("assistant", "Hi!"))
    assert digest("be brief", history) != digest("be verbose", history)
    assert digest("", history) != digest("", (Turn("user", "hello!"), Turn("assistant", "Hi!")))
    assert digest("", history) != digest("", history[:1])


def test_a_request_is_read_into_instructions_history_and_the_new_message() -> None:
    body = request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {"role": "user", "content": "hi", "name": "alice"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}],
            },
            {"role": "user", "content": "weather?"},
        ],
        stream=True,
        stream_options={"include_usage": True},
        metadata={"conversation_id": "c-1"},
    )
    chat = parse_request(body, MODEL)
    assert chat.transcript.instructions == "Be brief.\n\nUse metric units."
    assert chat.transcript.history == (Turn("user", "hi"), Turn("assistant", "Hello!"))
    assert chat.transcript.message == "weather?"
    assert chat.stream and chat.include_usage
    assert chat.conversation == "c-1"
    assert chat.transcript.answered("Sunny.") == digest(
        "Be brief.\n\nUse metric units.",
        [*chat.transcript.history, Turn("user", "weather?"), Turn("assistant", "Sunny.")],
    )


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{", 400, "not valid JSON"),
        (b"[]", 400, "JSON object"),
        (request(model="gpt-4o"), 404, "offers 'herald'"),
        (request(temprature=1), 400, "Unknown field 'temprature'"),
        (request(messages=[]), 400, "non-empty list"),
        (request(messages=[{"role": "tool", "content": "42", "tool_call_id": "x"}]), 400, "own tools"),
        (request(messages=[{"role": "wizard", "content": "hi"}]), 400, "role 'wizard'"),
        (request(messages=[{"role": "assistant", "content": "hi"}, {"role": "user", "content": "?"}]), 400,
         "start with a user message"),
        (request(messages=[{"role": "user", "content": "   "}]), 400, "with some text"),
        (request(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]), 400, "text only"),
        (request(stream="yes"), 400, "true or false"),
        (request(metadata={"conversation_id": ""}), 400, "conversation id"),
        (request(logprobs=True), 400, "log probabilities"),
        (request(modalities=["text", "audio"]), 400, "text only"),
        (request(tool_choice="required"), 400, "own tools"),
    ],
)  # fmt: skip
def test_a_bad_request_gets_one_sentence_and_its_status(body: bytes, status: int, says: str) -> None:
    error = refusal(body)
    assert error.status == status
    assert says in error.message
    assert error.body()["error"]["type"] == "invalid_request_error"


def test_sampling_settings_are_accepted_and_ignored() -> None:
    chat = parse_request(request(temperature=0.1, top_p=0.5, max_tokens=9, stop="x", user="u", seed=3), MODEL)
    assert chat.transcript.message == "hi" and not chat.stream


def test_chunks_and_usage_are_written_as_openai_writes_them() -> None:
    chunks = Chunks("chatcmpl-1", MODEL, 1700000000, include_usage=True)
    first = json.loads(chunks.start().removeprefix(b"data: "))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["usage"] is None  # with include_usage every chunk carries the field, null until the last
    usage = json.loads(chunks.usage(Usage(100, 20, 900, 50)).removeprefix(b"data: "))
    assert usage["choices"] == []
    assert usage["usage"]["prompt_tokens"] == 1050
    assert usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 900
    assert usage_body(Usage(100, 20, 900, 50))["total_tokens"] == 1070
    plain = Chunks("chatcmpl-1", MODEL, 1700000000, include_usage=False)
    assert "usage" not in json.loads(plain.text("x").removeprefix(b"data: "))


async def test_the_client_gets_every_response_of_a_turn_with_a_blank_line_between() -> None:
    shown: list[str] = []

    async def show(piece: str) -> None:
        shown.append(piece)

    text = AnswerText(show, retractable=False)
    search: list[TurnEvent] = [ToolStarted("web_search", "{}"), ToolFinished("web_search", False)]
    for event in [TextDelta("Let me look."), *search, TextDelta("It is "), TextDelta("sunny.")]:
        await text.on_event(event)
    result = TurnResult(
        text="It is sunny.", usage=Usage(), iterations=2, notices=("The answer was cut off.",)
    )
    assert await text.finish(result) == "Let me look.\n\nIt is sunny.\n\nℹ️ The answer was cut off."
    assert "".join(shown) == text.text  # what was streamed is what the client holds


async def test_a_restarted_response_is_taken_back_only_where_nothing_was_shown() -> None:
    async def nowhere(piece: str) -> None:
        return None

    events: list[TurnEvent] = [
        TextDelta("Hel"),
        Retrying(1, 0.1, "overloaded", discard_partial=True),
        TextDelta("Hello!"),
    ]
    whole = AnswerText(nowhere, retractable=True)
    streamed = AnswerText(nowhere, retractable=False)
    for event in events:
        await whole.on_event(event)
        await streamed.on_event(event)
    assert whole.text == "Hello!"
    assert streamed.text == "Hel\n\nHello!"


async def test_nothing_more_is_shown_once_the_turn_is_no_longer_trusted() -> None:
    shown: list[str] = []
    trusted = [True]

    async def show(piece: str) -> None:
        shown.append(piece)

    text = AnswerText(show, retractable=False, trusted=lambda: trusted[0])
    await text.on_event(TextDelta("one "))
    trusted[0] = False
    await text.on_event(TextDelta("two"))
    trusted[0] = True
    await text.on_event(TextDelta(" three"))
    assert shown == ["one "]


def test_a_key_is_never_written_into_the_config() -> None:
    with pytest.raises(ConfigError) as refused:
        validate(
            {"api": {"keys": [{"key": "sk-live-0123456789abcdef", "person": "api:alice"}]}}, "config.yaml"
        )
    assert "must be $NAME" in str(refused.value)
    for keys, says in (
        ([{"person": "api:alice"}], "exactly one of key ($NAME) or sha256"),
        ([{"key": "$A", "sha256": "0" * 64, "person": "api:alice"}], "exactly one of"),
        ([{"sha256": "abc", "person": "api:alice"}], "64 hexadecimal digits"),
        ([{"key": "$A", "person": "alice"}], "not platform:user_id"),
        ([{"key": "$A", "person": "api:a"}, {"key": "$A", "person": "api:b"}], "the same key is given twice"),
        ([{"key": "$A", "person": "api:a"}, {"key": "$B", "person": "api:a"}], "two keys are labelled api:a"),
    ):
        with pytest.raises(ConfigError) as refused:
            validate({"api": {"keys": keys}}, "config.yaml")
        assert says in str(refused.value)


def test_keys_are_checked_by_their_digest(tmp_path: Path) -> None:
    home = HeraldHome(tmp_path)
    stored = "stored-key-0123456789"
    config = HeraldConfig.model_validate(
        {
            "api": {
                "keys": [
                    {"key": "$ALICE_KEY", "person": "api:alice"},
                    {
                        "sha256": hashlib.sha256(stored.encode()).hexdigest(),
                        "person": "telegram:7",
                        "name": "bob",
                    },
                ]
            }
        }
    )
    ring = key_ring(config.api.keys, home, {"ALICE_KEY": "alice-key-0123456789"})
    alice = ring.find("alice-key-0123456789")
    assert alice is not None and alice.person == "api:alice" and alice.label == "api:alice"
    bob = ring.find(stored)
    assert bob is not None and (bob.platform, bob.user_id, bob.label) == ("telegram", "7", "bob")
    assert ring.find("alice-key-012345678") is None
    with pytest.raises(ConfigError) as unset:
        key_ring(config.api.keys, home, {})
    assert "$ALICE_KEY but ALICE_KEY is not set" in str(unset.value)
    with pytest.raises(ConfigError) as weak:
        key_ring(config.api.keys, home, {"ALICE_KEY": "short"})
    assert "use at least 16" in str(weak.value)


def test_herald_api_new_key_prints_a_key_and_both_ways_to_configure_it(herald: Any, home: HeraldHome) -> None:
    ran = herald("api", "new-key", "--person", "api:alice")
    assert ran.returncode == 0, ran.stderr
    found = re.search(r"sk-herald-\S+", ran.stdout)
    assert found is not None
    key = found.group(0)
    assert f"HERALD_API_KEY_ALICE={key}" in ran.stdout
    snippets = re.findall(r"^\s+- (\{.*\})$", ran.stdout, re.MULTILINE)
    assert len(snippets) == 2
    for snippet in snippets:
        config = validate({"api": {"keys": [yaml.safe_load(snippet)]}}, "config.yaml")
        ring = key_ring(config.api.keys, home, {"HERALD_API_KEY_ALICE": key})
        caller = ring.find(key)
        assert caller is not None and caller.person == "api:alice"
