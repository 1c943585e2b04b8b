"""Provider pieces without the network: usage dialects, error classification, payload replay."""

from __future__ import annotations

import json

import anthropic
import httpx2
import openai
import pytest
from openai.types import CompletionUsage

from agent.model.messages import Message, ToolCall
from agent.model.provider import ProviderError
from agent.providers.anthropic_provider import AnthropicProvider, group_wire_messages
from agent.providers.anthropic_provider import normalize_usage as anthropic_usage
from agent.providers.errors import from_sdk_exception, incomplete_stream, provider_failures
from agent.providers.openai_provider import OpenAIProvider
from agent.providers.openai_provider import normalize_usage as openai_usage
from agent.usage import Usage


def test_anthropic_usage_with_and_without_the_ttl_split() -> None:
    split = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 300,
        "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
    }
    assert anthropic_usage(split) == Usage(10, 5, 900, 100, 200)
    legacy = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 300}
    assert anthropic_usage(legacy) == Usage(10, 5, 0, 300, 0)


def test_openai_deepseek_and_openrouter_usage_dialects() -> None:
    plain = CompletionUsage.model_validate(
        {"prompt_tokens": 2000, "completion_tokens": 50, "total_tokens": 2050,
         "prompt_tokens_details": {"cached_tokens": 1536}}
    )  # fmt: skip
    assert openai_usage(plain) == Usage(input_tokens=464, output_tokens=50, cache_read_tokens=1536)
    deepseek = CompletionUsage.model_validate(
        {"prompt_tokens": 2000, "completion_tokens": 50, "total_tokens": 2050,
         "prompt_cache_hit_tokens": 1200, "prompt_cache_miss_tokens": 800}
    )  # fmt: skip
    assert openai_usage(deepseek).cache_read_tokens == 1200
    openrouter = CompletionUsage.model_validate(
        {"prompt_tokens": 3000, "completion_tokens": 10, "total_tokens": 3010,
         "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 1500}}
    )  # fmt: skip
    assert openai_usage(openrouter) == Usage(500, 10, 1000, 1500, 0)
    assert openai_usage(None) == Usage()


def _response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(
        status, headers=headers, request=httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    )


def test_errors_are_classified_with_retry_after() -> None:
    limited = anthropic.RateLimitError(
        "slow down",
        response=_response(429, {"retry-after": "7"}),
        body={"error": {"type": "rate_limit_error"}},
    )
    error = from_sdk_exception(limited, anthropic)
    assert error.retryable and error.status == 429 and error.retry_after == 7.0
    bad = openai.BadRequestError(
        "no", response=_response(400), body={"error": {"message": "bad tool schema"}}
    )
    error = from_sdk_exception(bad, openai)
    assert not error.retryable and str(error) == "bad tool schema"
    midstream = anthropic.APIStatusError(
        "overloaded", response=_response(200), body={"type": "error", "error": {"type": "overloaded_error"}}
    )
    error = from_sdk_exception(midstream, anthropic)
    assert error.retryable and error.status == 529


def test_stored_payloads_are_replayed_and_converted_across_apis() -> None:
    claude = AnthropicProvider(
        model="claude-sonnet-4-6", api_key="k", base_url="http://127.0.0.1:1", timeout=1
    )
    gpt = OpenAIProvider(model="gpt-5", api_key="k", base_url="http://127.0.0.1:1/v1", timeout=1)
    sent = {"role": "user", "content": [{"type": "text", "text": "exactly as sent"}]}
    message = Message(role="user", content="exactly as sent", payload=sent, payload_api="anthropic")
    assert claude.wire_fragment(message) is sent
    assert gpt.wire_fragment(message) == {"role": "user", "content": "exactly as sent"}


def test_parallel_tool_results_become_one_user_message_in_call_order() -> None:
    calls = (ToolCall("a", "todo", "{}"), ToolCall("b", "todo", "{}"))
    claude = AnthropicProvider(
        model="claude-sonnet-4-6", api_key="k", base_url="http://127.0.0.1:1", timeout=1
    )
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", content="1", tool_call_id="a"),
        Message(role="tool", content="2", tool_call_id="b", is_error=True),
    ]
    wire = group_wire_messages(messages, claude.wire_fragment)
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in wire[2]["content"]] == ["a", "b"]
    assert wire[2]["content"][1]["is_error"] is True


def test_transport_and_parser_failures_are_classified_without_the_sdk_wrapping_them() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    refused = anthropic.APIConnectionError(request=request)
    refused.__cause__ = httpx2.ConnectError("All connection attempts failed")
    cases: list[tuple[Exception, str]] = [
        (refused, "unreachable"),
        (anthropic.APITimeoutError(request=request), "timeout"),
        (httpx2.RemoteProtocolError("incomplete chunked read"), "connection"),  # leaks from anthropic
        (httpx2.ReadTimeout("read timed out"), "timeout"),  # leaks from the anthropic stream iterator
        (httpx2.ReadError("connection reset"), "connection"),
        (ConnectionResetError("reset by peer"), "connection"),
        (json.JSONDecodeError("Unterminated string", '{"a": "b', 6), "malformed"),  # leaks from both
        (anthropic.APIResponseValidationError(_response(200), body=None), "malformed"),
    ]
    for exc, kind in cases:
        error = from_sdk_exception(exc, anthropic)
        assert (error.kind, error.retryable) == (kind, True), exc

    bug = from_sdk_exception(KeyError("usage"), openai)
    assert bug.kind == "internal" and not bug.retryable and "KeyError" in str(bug)
    assert from_sdk_exception(incomplete_stream("message_stop"), anthropic).kind == "connection"


def test_provider_failures_lets_only_provider_errors_out_and_masks_the_key() -> None:
    with pytest.raises(ProviderError) as info, provider_failures(openai, "p", ["sk-secret-key"]):
        raise RuntimeError("boom with sk-secret-key inside")
    assert info.value.kind == "internal" and isinstance(info.value.__cause__, RuntimeError)
    assert "sk-secret-key" not in str(info.value) and "[REDACTED]" in str(info.value)
    with pytest.raises(ProviderError) as info, provider_failures(openai, "p"):
        raise incomplete_stream("a finish_reason")
    assert info.value.retryable and info.value.kind == "connection"
