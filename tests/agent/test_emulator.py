"""The provider emulator, driven through the real anthropic / openai SDKs.

Every assertion is on what a client observes (usage, events, errors) or on what the emulator
recorded, so these tests also pin down the cache model the benchmarks rely on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.emulator.blocks import openai_serialize
from tests.emulator.tokens import block_tokens
from tests.fakes.waiting import WAIT_TIMEOUT
from tests.media_files import pdf, transparent_png

SONNET = "claude-sonnet-4-5"  # 1024-token minimum; claude-sonnet-4-6 needs 2048
EPHEMERAL: Any = {"type": "ephemeral"}
ONE_HOUR: Any = {"type": "ephemeral", "ttl": "1h"}


@dataclass
class Env:
    emu: ProviderEmulator
    url: str
    anthropic: AsyncAnthropic
    openai: AsyncOpenAI


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    emu = ProviderEmulator()
    async with emu.serve() as url:
        a = AsyncAnthropic(base_url=url, api_key="test", max_retries=0)
        o = AsyncOpenAI(base_url=url + "/v1", api_key="test", max_retries=0)
        async with a, o:
            yield Env(emu, url, a, o)


def words(tokens: int, tag: str = "") -> str:
    """Distinct text of about ``tokens`` tokens."""
    unit = f"{tag} lorem ipsum dolor sit amet "
    return (unit * (tokens * 4 // len(unit) + 1))[: tokens * 4]


def system(text: str, marker: Any = EPHEMERAL) -> Any:
    block: dict[str, Any] = {"type": "text", "text": text}
    if marker is not None:
        block["cache_control"] = marker
    return [block]


def user(content: Any) -> Any:
    return {"role": "user", "content": content}


async def ask(env: Env, model: str = SONNET, **kwargs: Any) -> Any:
    kwargs.setdefault("messages", [user("hi")])
    return await env.anthropic.messages.create(model=model, max_tokens=200, **kwargs)


# --- Anthropic caching -------------------------------------------------------------------------


async def test_second_identical_request_reads_the_breakpoint(env: Env) -> None:
    sys_blocks = system(words(1500, "sys"))
    first = await ask(env, system=sys_blocks)
    second = await ask(env, system=sys_blocks)

    sys_tokens = block_tokens(sys_blocks[0])
    user_tokens = block_tokens({"type": "text", "text": "hi"})
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens == sys_tokens
    assert first.usage.input_tokens == user_tokens
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == sys_tokens
    assert second.usage.cache_read_input_tokens == sys_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == user_tokens

    rec = env.emu.requests[-1]
    assert (rec.cache_read, rec.cache_write, rec.prompt_tokens) == (sys_tokens, 0, sys_tokens + user_tokens)
    assert rec.breakpoints == 1 and rec.status == 200 and rec.error is None
    assert rec.oracle_tokens == sys_tokens + user_tokens  # the whole prompt had been sent before
    assert rec.system_json == json.dumps(
        [{"type": "text", "text": sys_blocks[0]["text"]}], separators=(",", ":"), ensure_ascii=False
    )


async def test_below_the_model_minimum_nothing_is_cached(env: Env) -> None:
    sys_blocks = system(words(3000, "opus"))  # >= 1024 but < 4096 (Opus 4.5 minimum)
    for _ in range(2):
        msg = await ask(env, model="claude-opus-4-5-20251101", system=sys_blocks)
        assert msg.usage.cache_read_input_tokens == 0
        assert msg.usage.cache_creation_input_tokens == 0
        assert msg.usage.input_tokens == env.emu.requests[-1].prompt_tokens
    assert env.emu.requests[-1].oracle_tokens == 0  # below the minimum even a perfect policy reads 0

    await ask(env, model=SONNET, system=sys_blocks)  # the same prefix is cacheable on Sonnet
    assert (await ask(env, model=SONNET, system=sys_blocks)).usage.cache_read_input_tokens > 0


async def test_minimum_is_configurable_per_model() -> None:
    emu = ProviderEmulator(min_cache_tokens={"claude-sonnet-4": 50})
    async with emu.serve() as url, AsyncAnthropic(base_url=url, api_key="t", max_retries=0) as client:
        sys_blocks = system(words(100))
        for _ in range(2):
            await client.messages.create(model=SONNET, max_tokens=10, system=sys_blocks, messages=[user("q")])
    assert emu.requests[1].cache_read == block_tokens(sys_blocks[0])


async def test_five_breakpoints_are_rejected(env: Env) -> None:
    content = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(4)]
    with pytest.raises(anthropic.BadRequestError) as err:
        await ask(env, system=system("sys"), messages=[user(content)])
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in str(err.value)
    assert env.emu.requests[-1].status == 400 and env.emu.requests[-1].breakpoints == 5


async def test_invalid_markers_are_rejected(env: Env) -> None:
    with pytest.raises(anthropic.BadRequestError, match="must not come after"):
        await ask(env, system=system("a") + system("b", ONE_HOUR))
    empty = [{"type": "text", "text": "", "cache_control": EPHEMERAL}]
    with pytest.raises(anthropic.BadRequestError, match="empty text blocks"):
        await ask(env, messages=[user(empty)])


def lookback_request(prefix: str, extra_blocks: int) -> Any:
    """A big system prompt, then one user message; the breakpoint sits on its last block."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "start"}]
    blocks += [{"type": "text", "text": f"tool output {i}"} for i in range(extra_blocks)]
    blocks[-1]["cache_control"] = EPHEMERAL
    return {"system": system(words(1500, prefix), None), "messages": [user(blocks)]}


@pytest.mark.parametrize(("extra", "hits"), [(20, True), (21, False)])
async def test_twenty_block_lookback(env: Env, extra: int, hits: bool) -> None:
    await ask(env, **lookback_request("lb", 0))  # writes at the "start" block
    written = env.emu.requests[-1].cache_write
    msg = await ask(env, **lookback_request("lb", extra))
    assert msg.usage.cache_read_input_tokens == (written if hits else 0)
    assert env.emu.requests[-1].oracle_tokens >= written  # the oracle ignores the lookback


async def test_ttl_five_minutes_expires_one_hour_does_not(env: Env) -> None:
    short = system(words(1500, "short"))
    long_ = system(words(1500, "long"), ONE_HOUR)
    first = await ask(env, system=long_)
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens > 0
    await ask(env, system=short)

    env.emu.clock.advance(200)
    assert (await ask(env, system=short)).usage.cache_read_input_tokens > 0  # a hit refreshes the TTL
    env.emu.clock.advance(200)
    assert (await ask(env, system=short)).usage.cache_read_input_tokens > 0
    env.emu.clock.advance(301)
    assert (await ask(env, system=short)).usage.cache_read_input_tokens == 0
    assert (await ask(env, system=long_)).usage.cache_read_input_tokens > 0
    assert env.emu.clock.now() == 701


async def test_mixed_ttls_split_cache_creation(env: Env) -> None:
    tools: Any = [
        {
            "name": "lookup",
            "description": words(1200, "tool"),
            "input_schema": {"type": "object"},
            "cache_control": ONE_HOUR,
        }
    ]
    msg = await ask(env, tools=tools, system=system(words(600, "s")))
    assert msg.usage.cache_creation is not None
    assert msg.usage.cache_creation.ephemeral_1h_input_tokens == block_tokens(tools[0])
    five_minutes = env.emu.requests[-1].cache_write - block_tokens(tools[0])
    assert msg.usage.cache_creation.ephemeral_5m_input_tokens == five_minutes > 0
    assert env.emu.requests[-1].tools_json.startswith('[{"name":"lookup"')
    assert "cache_control" not in env.emu.requests[-1].tools_json


async def test_reset_cache_and_oracle(env: Env) -> None:
    plain = system(words(1500, "plain"), None)
    await ask(env, system=plain)
    again = await ask(env, system=plain)
    assert again.usage.cache_read_input_tokens == 0  # no breakpoint, no caching
    assert env.emu.requests[-1].oracle_tokens == env.emu.requests[-1].prompt_tokens

    marked = system(words(1500, "marked"))
    await ask(env, system=marked)
    env.emu.reset_cache()
    assert (await ask(env, system=marked)).usage.cache_read_input_tokens == 0


def _file_block(kind: str, media_type: str, data: bytes) -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}
    return {"type": kind, "source": source}


def _turns(blocks: list[dict[str, Any]]) -> list[Any]:
    """One user message per file, answered in between: files spread over a conversation's history."""
    messages: list[Any] = []
    for block in blocks:
        messages += [user([block, {"type": "text", "text": "look"}]), {"role": "assistant", "content": "ok"}]
    return [*messages, user("and now?")]


async def test_images_and_pdf_pages_are_limited_per_request_across_all_messages(env: Env) -> None:
    """Anthropic counts every image and PDF page a request carries, earlier messages included."""
    dot = _file_block("image", "image/png", transparent_png(8, 8))
    await ask(env, messages=_turns([dot] * 100))
    too_many = r"Too much media: 0 document pages \+ 101 images > 100"
    with pytest.raises(anthropic.BadRequestError, match=too_many):
        await ask(env, messages=_turns([dot] * 101))
    sixty = _file_block("document", "application/pdf", pdf(60, "x"))
    await ask(env, messages=_turns([sixty]))
    too_many = r"Too much media: 120 document pages \+ 1 images > 100"
    with pytest.raises(anthropic.BadRequestError, match=too_many):
        await ask(env, messages=_turns([sixty, dot, sixty]))
    assert env.emu.requests[-1].status == 400


async def test_prompt_too_long_and_count_tokens() -> None:
    emu = ProviderEmulator(context_windows={"claude": 500})
    async with emu.serve() as url, AsyncAnthropic(base_url=url, api_key="t", max_retries=0) as client:
        counted = await client.messages.count_tokens(model=SONNET, messages=[user(words(800))])
        assert counted.input_tokens == emu.requests[-1].prompt_tokens > 500
        with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: \d+ tokens > 500 maximum"):
            await client.messages.create(model=SONNET, max_tokens=5, messages=[user(words(800))])


# --- Anthropic replies and streaming -----------------------------------------------------------


async def test_stream_helper_round_trips_text_and_tool_use(env: Env) -> None:
    env.emu.script(Reply(text="Checking the weather.", tool_calls=[ToolUse("weather", {"city": "Paris"})]))
    async with env.anthropic.messages.stream(model=SONNET, max_tokens=200, messages=[user("weather?")]) as s:
        texts = [t async for t in s.text_stream]
        final = await s.get_final_message()
    assert "".join(texts) == "Checking the weather."
    assert final.stop_reason == "tool_use"
    tool = final.content[1]
    assert tool.type == "tool_use" and tool.name == "weather" and tool.input == {"city": "Paris"}
    assert tool.id == "toolu_emu_0001"
    assert final.usage.output_tokens == env.emu.requests[-1].output_tokens > 0


async def test_raw_stream_event_sequence_and_usage(env: Env) -> None:
    sys_blocks = system(words(1500, "raw"))
    await ask(env, system=sys_blocks)
    env.emu.script(Reply(text="hello there", tool_calls=[ToolUse("f", {"city": "Paris"}, id="toolu_x")]))
    stream = await env.anthropic.messages.create(
        model=SONNET, max_tokens=200, system=sys_blocks, messages=[user("hi")], stream=True
    )
    events = [event async for event in stream]
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start, delta = events[0], events[-2]
    assert start.type == "message_start" and delta.type == "message_delta"
    assert start.message.usage.cache_read_input_tokens == block_tokens(sys_blocks[0])
    assert start.message.usage.output_tokens == 1
    assert delta.delta.stop_reason == "tool_use"
    assert delta.usage.output_tokens == env.emu.requests[-1].output_tokens
    assert env.emu.requests[-1].stream


async def test_script_responder_and_default_replies(env: Env) -> None:
    env.emu.script(Reply(text="scripted"))
    env.emu.responder = lambda body, api: Reply(text=f"from responder ({api})") if api == "openai" else None
    assert (await ask(env)).content[0].text == "scripted"

    tool_result = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "42 degrees"}]
    history = [user("go"), {"role": "assistant", "content": "calling"}, user(tool_result)]
    msg = await ask(env, messages=history)
    assert msg.stop_reason == "end_turn" and [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text.startswith("Emulated reply 2 to: 42 degrees")
    assert abs(msg.usage.output_tokens - 40) <= 1

    chat = await env.openai.chat.completions.create(model="gpt-4o", messages=[user("x")])
    assert chat.choices[0].message.content == "from responder (openai)"

    env.emu.script(Reply(text_tokens=100))
    assert (await ask(env)).usage.output_tokens == 100


# --- OpenAI caching ----------------------------------------------------------------------------


def chat(text: str, *more: Any) -> Any:
    return [{"role": "system", "content": "You are terse."}, user(text), *more]


async def test_openai_1024_and_128_token_steps(env: Env) -> None:
    create = env.openai.chat.completions.create
    small = chat(words(900))
    for _ in range(2):
        r = await create(model="gpt-4o", messages=small)
        assert r.usage is not None and r.usage.prompt_tokens_details is not None
        assert r.usage.prompt_tokens_details.cached_tokens == 0  # under 1024: never cached

    base = chat(words(1200, "big"))
    first = await create(model="gpt-4o", messages=base, prompt_cache_key="s1")
    second = await create(model="gpt-4o", messages=base, prompt_cache_key="s1")
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    shared = len(openai_serialize({"messages": base})) // 4
    expected = 1024 + (shared - 1024) // 128 * 128
    assert second.usage.prompt_tokens_details.cached_tokens == expected

    longer = [*base, {"role": "assistant", "content": "ok"}, user(words(600, "next"))]
    third = await create(model="gpt-4o", messages=longer, prompt_cache_key="s1")
    assert third.usage is not None and third.usage.prompt_tokens_details is not None
    assert third.usage.prompt_tokens_details.cached_tokens == expected  # the shared prefix, in steps
    other_key = await create(model="gpt-4o", messages=longer, prompt_cache_key="s2")
    assert other_key.usage is not None and other_key.usage.prompt_tokens_details is not None
    assert other_key.usage.prompt_tokens_details.cached_tokens == 0  # routed elsewhere
    assert env.emu.requests[-1].oracle_tokens > expected and env.emu.requests[-1].prompt_cache_key == "s2"
    assert env.emu.requests[-1].system_json == '[{"role":"system","content":"You are terse."}]'

    env.emu.clock.advance(301)
    stale = await create(model="gpt-4o", messages=longer, prompt_cache_key="s2")
    assert stale.usage is not None and stale.usage.prompt_tokens_details is not None
    assert stale.usage.prompt_tokens_details.cached_tokens == 0


async def test_openai_stream_include_usage_and_tool_calls(env: Env) -> None:
    env.emu.script(
        Reply(text="Let me look.", tool_calls=[ToolUse("search", {"query": "prompt caching docs"})]),
        Reply(text="plain"),
    )
    stream = await env.openai.chat.completions.create(
        model="gpt-4o",
        messages=chat("find it"),
        stream=True,
        stream_options={"include_usage": True},
        prompt_cache_key="session-1",
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    args = "".join(
        tc.function.arguments or ""
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function is not None
    )
    assert text == "Let me look." and json.loads(args) == {"query": "prompt caching docs"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == env.emu.requests[-1].output_tokens

    stream = await env.openai.chat.completions.create(model="gpt-4o", messages=chat("again"), stream=True)
    plain = [c async for c in stream]
    assert all(c.usage is None and c.choices for c in plain)


async def test_deepseek_usage_fields(env: Env) -> None:
    messages = chat(words(1500, "ds"))
    await env.openai.chat.completions.create(model="deepseek-chat", messages=messages)
    r = await env.openai.chat.completions.create(model="deepseek-chat", messages=messages)
    assert r.usage is not None
    extra = r.usage.model_extra or {}
    assert extra["prompt_cache_hit_tokens"] >= 1024
    assert extra["prompt_cache_hit_tokens"] + extra["prompt_cache_miss_tokens"] == r.usage.prompt_tokens


async def test_openrouter_claude_honours_content_part_markers(env: Env) -> None:
    messages: Any = [
        {"role": "system", "content": system(words(1500, "or"))},
        user("hello"),
    ]
    first = await env.openai.chat.completions.create(model="anthropic/claude-sonnet-4.5", messages=messages)
    second = await env.openai.chat.completions.create(model="anthropic/claude-sonnet-4.5", messages=messages)
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    written = first.usage.prompt_tokens_details.cache_write_tokens
    assert written is not None and written > 1024 and first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == written
    assert second.usage.prompt_tokens_details.cache_write_tokens == 0
    assert env.emu.requests[-1].breakpoints == 1


# --- faults ------------------------------------------------------------------------------------


async def test_fail_next_rate_limit_with_retry_after(env: Env) -> None:
    env.emu.fail_next(429, retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as err:
        await ask(env)
    assert err.value.response.headers["retry-after"] == "7"
    assert isinstance(err.value.body, dict) and err.value.body["error"]["type"] == "rate_limit_error"
    assert env.emu.requests[-1].status == 429 and env.emu.requests[-1].error is not None
    assert (await ask(env)).stop_reason == "end_turn"  # only the next request failed

    env.emu.fail_next(529, count=2, api="openai")
    assert (await ask(env)).content  # anthropic requests are not affected
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            await env.openai.chat.completions.create(model="gpt-4o", messages=chat("x"))
    env.emu.fail_next(429, retry_after=1.5, api="openai")
    with pytest.raises(openai.RateLimitError) as oerr:
        await env.openai.chat.completions.create(model="gpt-4o", messages=chat("x"))
    assert oerr.value.response.headers["retry-after"] == "1.5"


async def test_fail_midstream_in_both_sdks(env: Env) -> None:
    env.emu.script(Reply(text="the real answer"))
    env.emu.fail_midstream(count=2)
    got: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as err:
        async with env.anthropic.messages.stream(model=SONNET, max_tokens=50, messages=[user("hi")]) as s:
            async for text in s.text_stream:
                got.append(text)
    assert got == ["partial "]
    assert isinstance(err.value.body, dict) and err.value.body["error"]["type"] == "overloaded_error"
    assert env.emu.requests[-1].status == 200 and env.emu.requests[-1].error is not None

    pieces: list[str] = []
    with pytest.raises(openai.APIError, match="Overloaded"):
        stream = await env.openai.chat.completions.create(model="gpt-4o", messages=chat("x"), stream=True)
        async for chunk in stream:
            pieces.append(chunk.choices[0].delta.content or "")
    assert "".join(pieces) == "partial "

    # the scripted reply was not consumed by the failed streams
    assert (await ask(env)).content[0].text == "the real answer"


# --- transport faults, as a raw HTTP client sees them ---------------------------------------------


@dataclass
class RawResult:
    status: int | None
    data: bytes
    error: BaseException | None
    seconds: float


async def raw_post(
    url: str, *, stream: bool, path: str = "/v1/messages", read_timeout: float = 5.0, **extra: Any
) -> RawResult:
    """POST a minimal request with aiohttp and read the whole body, keeping whatever arrived."""
    body = (
        {"model": SONNET, "max_tokens": 50, "messages": [user("hi")], "stream": stream}
        if path == "/v1/messages"
        else {"model": "gpt-4o", "messages": chat("hi"), "stream": stream}
    )
    status, data, error = None, b"", None
    start = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=read_timeout)) as session:
        try:
            async with session.post(url + path, json={**body, **extra}) as response:
                status = response.status
                async for piece in response.content.iter_any():
                    data += piece
        except aiohttp.ClientError as exc:
            error = exc
    return RawResult(status, data, error, time.monotonic() - start)


def sse_data(data: bytes) -> list[str]:
    return [line[6:] for line in data.decode().splitlines() if line.startswith("data: ")]


async def test_drop_midstream_cuts_the_chunked_body(env: Env) -> None:
    env.emu.script(Reply(text="the real answer"))
    env.emu.drop_midstream(after_text="Half an ans")
    got = await raw_post(env.url, stream=True)
    assert got.status == 200
    assert isinstance(got.error, aiohttp.ClientPayloadError)  # "Response payload is not completed"
    events = [json.loads(d) for d in sse_data(got.data)]
    assert [e["type"] for e in events] == ["message_start", "content_block_start", "content_block_delta"]
    assert events[-1]["delta"]["text"] == "Half an ans"
    rec = env.emu.requests[-1]
    assert rec.status == 200 and rec.error == "dropped: connection closed mid-stream (body unfinished)"
    assert not rec.ok and rec.reply_text == "Half an ans"

    # the SDKs' transport (httpx2) reports the unfinished chunked body as a protocol error
    env.emu.drop_midstream(api="openai")
    async with httpx2.AsyncClient() as client:
        received = b""
        with pytest.raises(httpx2.RemoteProtocolError, match="incomplete chunked read"):
            body = {"model": "gpt-4o", "messages": chat("x"), "stream": True}
            async with client.stream("POST", env.url + "/v1/chat/completions", json=body) as response:
                async for piece in response.aiter_bytes():
                    received += piece
    assert b'"content":"partial "' in received and b"[DONE]" not in received

    # the scripted reply was not consumed; a non-streaming request passes over a stream-only fault
    env.emu.drop_midstream()
    plain = await raw_post(env.url, stream=False)
    assert plain.error is None and json.loads(plain.data)["content"][0]["text"] == "the real answer"
    assert env.emu.faults.pending and (await raw_post(env.url, stream=True)).error is not None


async def test_drop_midstream_close_delimited_looks_like_a_normal_end(env: Env) -> None:
    env.emu.drop_midstream(close_delimited=True)
    got = await raw_post(env.url, stream=True)
    assert got.status == 200 and got.error is None  # no framing: the closed connection ends the body
    types = [json.loads(d)["type"] for d in sse_data(got.data)]
    assert types == ["message_start", "content_block_start", "content_block_delta"]  # no message_stop
    assert "close-delimited" in (env.emu.requests[-1].error or "")

    stream = await env.anthropic.messages.create(
        model=SONNET, max_tokens=50, messages=[user("hi")], stream=True
    )
    assert [e.type async for e in stream][-1] == "message_stop"  # the connection after it is fine


async def test_truncate_next_cuts_json_in_half_over_a_healthy_connection(env: Env) -> None:
    env.emu.script(Reply(text="kept for later"))
    env.emu.truncate_next(count=2)
    streamed = await raw_post(env.url, stream=True)
    assert streamed.status == 200 and streamed.error is None  # the stream itself ends properly
    lines = sse_data(streamed.data)
    assert [json.loads(d)["type"] for d in lines[:-1]] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    assert json.loads(lines[-2])["delta"]["text"] == "partial "
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[-1])
    assert lines[-1].startswith('{"type":"content_block_delta"')

    whole = await raw_post(env.url, stream=False)
    assert whole.status == 200 and whole.error is None
    with pytest.raises(json.JSONDecodeError):
        json.loads(whole.data)
    assert whole.data.startswith(b'{"id":"msg_emu_')
    assert [r.error for r in env.emu.requests] == ["truncated: JSON cut in half"] * 2

    after = await raw_post(env.url, stream=True, path="/v1/chat/completions")
    chunks = [json.loads(d) for d in sse_data(after.data)[:-1]]
    assert sse_data(after.data)[-1] == "[DONE]"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "kept for later"


async def test_stall_next_holds_the_request_then_answers_504(env: Env) -> None:
    env.emu.script(Reply(text="after the stall"))
    env.emu.stall_next(5.0)
    impatient = await raw_post(env.url, stream=True, read_timeout=0.2)
    assert isinstance(impatient.error, asyncio.TimeoutError) and impatient.status is None
    assert impatient.seconds < 2
    rec = env.emu.requests[-1]
    assert rec.error == "stalled: held 5s, then 504" and rec.status == 504 and rec.reply_text == ""

    env.emu.stall_next(0.3, api="openai")
    patient = await raw_post(env.url, stream=True, path="/v1/chat/completions")
    assert patient.status == 504 and patient.seconds >= 0.3
    assert json.loads(patient.data)["error"]["message"].startswith("Gateway timeout")
    assert (await ask(env)).content[0].text == "after the stall"  # no reply was consumed


async def test_faults_are_taken_in_queue_order_by_matching_requests(env: Env) -> None:
    env.emu.truncate_next()
    env.emu.fail_next(529)
    env.emu.drop_midstream()
    with pytest.raises(anthropic.BadRequestError):  # rejected: only a status fault could come first
        await ask(env, messages=[user([{"type": "text", "text": "", "cache_control": EPHEMERAL}])])
    assert [type(f).__name__ for f in env.emu.faults.pending] == ["TruncateFault", "HttpFault", "DropFault"]
    errors = []
    for _ in range(4):
        await raw_post(env.url, stream=True)
        errors.append(env.emu.requests[-1].error)
    assert errors[0] == "truncated: JSON cut in half"
    assert errors[1] is not None and errors[1].startswith("overloaded_error")
    assert errors[2] is not None and errors[2].startswith("dropped")
    assert errors[3] is None and not env.emu.faults.pending


def test_serve_in_thread_with_sync_clients() -> None:
    emu = ProviderEmulator()
    with emu.serve_in_thread() as url:
        sys_blocks = system(words(1500, "thread"))
        question = [user("q")]
        with anthropic.Anthropic(base_url=url, api_key="t", max_retries=0) as client:
            for _ in range(2):
                msg = client.messages.create(model=SONNET, max_tokens=9, system=sys_blocks, messages=question)
        assert msg.usage.cache_read_input_tokens == block_tokens(sys_blocks[0])
        emu.script(Reply(text="sync"))
        with openai.OpenAI(base_url=url + "/v1", api_key="t", max_retries=0) as oclient:
            r = oclient.chat.completions.create(model="gpt-4o", messages=chat("x"))
        assert r.choices[0].message.content == "sync"
    assert len(emu.requests) == 3


def test_module_entry_point_serves() -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.emulator", "--port", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[3]
        with anthropic.Anthropic(base_url=url, api_key="t", max_retries=0, timeout=WAIT_TIMEOUT) as client:
            msg = client.messages.create(model=SONNET, max_tokens=20, messages=[user("ping")])
        assert msg.content[0].text.startswith("Emulated reply 1 to: ping")  # type: ignore[union-attr]
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_TIMEOUT)
