"""The emulator's batch APIs through the real SDKs: Anthropic Message Batches, OpenAI Files + Batch.

A batch request is processed by the normal endpoint's handler when its batch ends, so it reads the
prompt cache a normal request wrote (and writes what a later one reads), and says it was a batch.
"""

from __future__ import annotations

import json
from typing import Any

from tests.agent.test_emulator import SONNET, Env, env, system, user, words
from tests.emulator.batches import BATCH_PATHS
from tests.emulator.tokens import block_tokens

__all__ = ["env"]  # the fixture, shared with tests/agent/test_emulator.py


async def test_an_anthropic_batch_reads_the_cache_a_normal_request_wrote(env: Env) -> None:
    params: dict[str, Any] = {
        "model": SONNET,
        "max_tokens": 200,
        "system": system(words(1500, "digest")),
        "messages": [user("What is new today?")],
    }
    await env.anthropic.messages.create(**params)  # writes the system prompt's entry
    env.emu.batch_delay = 60.0  # a minute of the emulated clock

    batches = env.anthropic.messages.batches
    created = await batches.create(requests=[{"custom_id": "day-1", "params": params}])  # type: ignore[typeddict-item]
    assert created.processing_status == "in_progress" and created.results_url is None
    assert (await batches.retrieve(created.id)).processing_status == "in_progress"
    env.emu.clock.advance(60.0)
    ended = await batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.request_counts.succeeded == 1

    [item] = [item async for item in await batches.results(created.id)]
    assert item.custom_id == "day-1" and item.result.type == "succeeded"
    usage = item.result.message.usage
    assert usage.cache_read_input_tokens == block_tokens(params["system"][0])
    assert usage.service_tier == "batch"
    record = env.emu.requests[-1]
    assert record.batch and record.path in BATCH_PATHS and record.cache_read == usage.cache_read_input_tokens


async def test_an_openai_batch_is_a_jsonl_file_in_and_out_with_its_cached_tokens(env: Env) -> None:
    body = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": words(1500, "report")}, user("Report, please.")],
        "max_completion_tokens": 200,
        "prompt_cache_key": "session-1",
    }
    first = await env.openai.chat.completions.create(**body)  # type: ignore[call-overload]
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    line = {"custom_id": "run-1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    upload = await env.openai.files.create(
        file=("batch.jsonl", json.dumps(line).encode() + b"\n", "application/jsonl"), purpose="batch"
    )
    batch = await env.openai.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    ended = await env.openai.batches.retrieve(batch.id)  # batch_delay 0: ends at its first poll
    assert ended.status == "completed" and ended.output_file_id and ended.error_file_id is None

    content = await env.openai.files.content(ended.output_file_id)
    [result] = [json.loads(raw) for raw in content.text.splitlines()]
    assert result["custom_id"] == "run-1" and result["response"]["status_code"] == 200
    cached = result["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 1024
    assert ended.usage is not None and ended.usage.input_tokens_details.cached_tokens == cached
    assert env.emu.requests[-1].batch


async def test_a_held_batch_can_be_cancelled_and_one_can_expire(env: Env) -> None:
    env.emu.batch_delay = None  # held until end_batches()
    params: dict[str, Any] = {"model": SONNET, "max_tokens": 50, "messages": [user("hello")]}
    batches = env.anthropic.messages.batches
    held = await batches.create(requests=[{"custom_id": "a", "params": params}])  # type: ignore[typeddict-item]
    await batches.cancel(held.id)
    cancelled = await batches.retrieve(held.id)
    assert cancelled.processing_status == "ended" and cancelled.request_counts.canceled == 1
    assert env.emu.cancelled_batches == [held.id]

    expiring = await batches.create(requests=[{"custom_id": "b", "params": params}])  # type: ignore[typeddict-item]
    env.emu.expire_batches()
    [item] = [item async for item in await batches.results(expiring.id)]
    assert item.result.type == "expired"
    assert not any(record.batch for record in env.emu.requests)  # neither was ever run
