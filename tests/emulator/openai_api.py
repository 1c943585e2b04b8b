"""OpenAI Chat Completions (and DeepSeek / OpenRouter-Claude flavours): caching and shapes.

Plain models get OpenAI's automatic prefix cache; ``deepseek*`` models additionally report
``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``; ``anthropic/*`` models (OpenRouter)
use Anthropic's breakpoint model on content-part ``cache_control`` markers.
"""

from __future__ import annotations

from typing import Any

from .blocks import RequestInvalid, openai_claude_layout, openai_layout
from .cache import layout_prefixes
from .media import check_vision
from .records import RecordedRequest, openai_system_json, tools_json
from .script import (
    AnswerFault,
    HttpFault,
    Reply,
    StallFault,
    ToolUse,
    broken_answer,
    fit_reply,
    openai_finish_reason,
    output_tokens,
)
from .state import EmulatorState
from .tokens import count_markers_in
from .wire import Outcome, chunks, dumps, retry_after_header, sse

API = "openai"
CREATED_BASE = 1_700_000_000  # `created` = this + the emulated clock, so runs are reproducible

ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request"),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided"),
    404: ("invalid_request_error", "model_not_found", "The model does not exist"),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests (emulated)"),
    500: ("server_error", None, "The server had an error while processing your request"),
    503: ("service_unavailable_error", None, "The engine is currently overloaded"),
    529: ("overloaded_error", None, "Overloaded"),
}


LISTED_MODELS = ("gpt-5", "gpt-4.1", "gpt-4o", "deepseek-chat")


def model_list() -> dict[str, Any]:
    """``GET /v1/models`` (the emulator answers any model name; these are what it lists)."""
    data = [
        {"id": name, "object": "model", "created": CREATED_BASE, "owned_by": "emulator"}
        for name in LISTED_MODELS
    ]
    return {"object": "list", "data": data}


def error_outcome(
    status: int, message: str | None = None, code: str | None = None, retry_after: float | None = None
) -> Outcome:
    """The real error body: ``{"error": {"message", "type", "param", "code"}}``."""
    kind, default_code, default_message = ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, f"Error {status}")
    )
    error = {"message": message or default_message, "type": kind, "param": None, "code": code or default_code}
    return Outcome(status, {"error": error}, headers=retry_after_header(retry_after))


def _fail(state: EmulatorState, rec: RecordedRequest, out: Outcome) -> Outcome:
    err = out.body["error"]
    rec.status, rec.error = out.status, f"{err['type']}: {err['message']}"
    state.record(rec)
    return out


def _usage(rec: RecordedRequest, claude: bool, deepseek: bool) -> dict[str, Any]:
    details: dict[str, Any] = {"cached_tokens": rec.cache_read, "audio_tokens": 0}
    if claude:
        details["cache_write_tokens"] = rec.cache_write
    usage: dict[str, Any] = {
        "prompt_tokens": rec.prompt_tokens,
        "completion_tokens": rec.output_tokens,
        "total_tokens": rec.prompt_tokens + rec.output_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if deepseek:
        usage["prompt_cache_hit_tokens"] = rec.cache_read
        usage["prompt_cache_miss_tokens"] = rec.prompt_tokens - rec.cache_read
    return usage


def _account(state: EmulatorState, rec: RecordedRequest, body: dict[str, Any], claude: bool) -> None:
    """Validate, then fill the record's token, cache and oracle fields (may raise RequestInvalid)."""
    now = state.clock.now()
    if claude:
        layout = openai_claude_layout(body)
        rec.prompt_tokens, rec.breakpoints = layout.total_tokens, layout.markers
        _check_window(state, rec)
        min_tokens = state.min_tokens(rec.model)
        prefixes = layout_prefixes(layout)
        rec.oracle_tokens = state.oracle.best(prefixes, min_tokens)
        usage = state.anthropic_cache.apply(layout, min_tokens, now)
        state.oracle.add(prefixes)
        rec.cache_read, rec.cache_write, rec.cache_write_1h = usage.read, usage.write, usage.write_1h
    else:
        prefix = openai_layout(body)
        rec.prompt_tokens = prefix.total_tokens
        _check_window(state, rec)
        min_tokens = state.openai_min_tokens(rec.model)
        rec.oracle_tokens = state.oracle.best(prefix.boundaries, min_tokens)
        retention = body.get("prompt_cache_retention")
        rec.cache_read = state.openai_cache.apply(
            prefix, rec.prompt_cache_key, retention if isinstance(retention, str) else None, now, min_tokens
        )
        state.oracle.add(prefix.boundaries)
    rec.input_tokens = rec.prompt_tokens - rec.cache_read - rec.cache_write


def _check_window(state: EmulatorState, rec: RecordedRequest) -> None:
    window = state.context_window(rec.model)
    if rec.prompt_tokens > window:
        raise _ContextTooLong(
            f"This model's maximum context length is {window} tokens. However, your messages resulted "
            f"in {rec.prompt_tokens} tokens. Please reduce the length of the messages."
        )


class _ContextTooLong(RequestInvalid):
    code = "context_length_exceeded"


def chat_completions(state: EmulatorState, path: str, raw: bytes, body: dict[str, Any]) -> Outcome:
    """``POST /v1/chat/completions``."""
    with state.lock:
        model = str(body.get("model", ""))
        key = body.get("prompt_cache_key")
        rec = RecordedRequest(
            api=API,
            path=path,
            model=model,
            stream=bool(body.get("stream")),
            body=raw,
            json=body,
            system_json=openai_system_json(body),
            tools_json=tools_json(body),
            breakpoints=count_markers_in(body.get("tools"), body.get("messages")),
            prompt_cache_key=key if isinstance(key, str) else None,
        )
        early = state.faults.take(API, rec.stream, early=True, model=rec.model, now=state.clock.now())
        if isinstance(early, HttpFault):
            return _fail(state, rec, error_outcome(early.status, retry_after=early.retry_after))
        if isinstance(early, StallFault):
            out = _fail(state, rec, error_outcome(504, "Gateway timeout: the upstream did not answer"))
            rec.error, out.hold = early.describe(), early.seconds
            return out
        claude = model.startswith("anthropic/")
        try:
            if not model:
                raise RequestInvalid("you must provide a model parameter")
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                raise RequestInvalid("'messages' must contain at least one message")
            check_vision(model, body["messages"])
            _account(state, rec, body, claude)
        except RequestInvalid as exc:
            return _fail(state, rec, error_outcome(400, str(exc), getattr(exc, "code", None)))

        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = limit if isinstance(limit, int) else None
        fault = state.faults.take(API, rec.stream, early=False, model=rec.model, now=state.clock.now())
        answer_fault = fault if isinstance(fault, AnswerFault) else None
        reply = Reply(text=answer_fault.after_text) if answer_fault else state.next_reply(body, API)
        text, calls, cut = fit_reply(reply, max_tokens)
        rec.output_tokens = output_tokens(text, calls)
        rec.reply_text = text
        finish = "length" if cut else _finish_reason(reply, calls)
        usage = _usage(rec, claude, model.startswith("deepseek"))
        head = {
            "id": state.next_id("chatcmpl-emu-"),
            "created": CREATED_BASE + int(state.clock.now()),
            "model": model,
            "system_fingerprint": "fp_emulator",
            "service_tier": "default",
        }
        tool_calls = [_tool_call(state, call) for call in calls]
        completion = _completion(head, text, tool_calls, finish, usage)
        if answer_fault is not None:
            rec.error = answer_fault.describe()
            state.record(rec)
            return _faulty_answer(head, completion, answer_fault, rec.stream)
        state.record(rec)
        if rec.stream:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            return Outcome(
                200, events=stream_chunks(head, text, tool_calls, finish, usage if include_usage else None)
            )
        return Outcome(200, completion)


def _completion(
    head: dict[str, Any], text: str, tool_calls: list[dict[str, Any]], finish: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text or None,
        "refusal": None,
        "annotations": [],
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}


def _finish_reason(reply: Reply, calls: list[ToolUse]) -> str:
    if reply.stop_reason:
        return openai_finish_reason(reply.stop_reason)
    return "tool_calls" if calls else "stop"


def _tool_call(state: EmulatorState, call: ToolUse) -> dict[str, Any]:
    return {
        "id": call.id or state.next_id("call_emu_"),
        "type": "function",
        "function": {"name": call.name, "arguments": dumps(call.arguments)},
    }


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None, with_usage: bool) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    data = {**head, "object": "chat.completion.chunk", "choices": [choice]}
    if with_usage:
        data["usage"] = None
    return sse(data)


def stream_chunks(
    head: dict[str, Any],
    text: str,
    tool_calls: list[dict[str, Any]],
    finish: str,
    usage: dict[str, Any] | None,
) -> list[bytes]:
    """Role chunk, content deltas, tool-call deltas, finish chunk, optional usage chunk, [DONE]."""
    with_usage = usage is not None
    events = [_chunk(head, {"role": "assistant", "content": "", "refusal": None}, None, with_usage)]
    events.extend(_chunk(head, {"content": piece}, None, with_usage) for piece in chunks(text))
    for index, call in enumerate(tool_calls):
        first = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        events.append(_chunk(head, {"tool_calls": [first]}, None, with_usage))
        for piece in chunks(call["function"]["arguments"], 16):
            more = {"index": index, "function": {"arguments": piece}}
            events.append(_chunk(head, {"tool_calls": [more]}, None, with_usage))
    events.append(_chunk(head, {}, finish, with_usage))
    if usage is not None:
        events.append(sse({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}))
    events.append(sse("[DONE]"))
    return events


def _partial_chunks(head: dict[str, Any], text: str) -> list[bytes]:
    """The role chunk and ``text``, with no finish_reason: an answer broken off early."""
    events = [_chunk(head, {"role": "assistant", "content": ""}, None, False)]
    events.extend(_chunk(head, {"content": piece}, None, False) for piece in chunks(text))
    return events


def _faulty_answer(
    head: dict[str, Any], completion: dict[str, Any], fault: AnswerFault, stream: bool
) -> Outcome:
    """The answer (whose text is the fault's ``after_text``) as ``fault`` breaks it; never a [DONE]."""

    def error_event(kind: str) -> bytes:  # data: {"error": {...}}, which the SDK raises APIError on
        message = "Overloaded" if kind == "overloaded_error" else f"Emulated {kind}"
        return sse({"error": {"message": message, "type": kind, "param": None, "code": None}})

    choice = {"index": 0, "delta": {"content": "more"}, "logprobs": None, "finish_reason": None}
    return broken_answer(
        fault,
        stream,
        document=completion,
        partial=_partial_chunks(head, fault.after_text),
        error_event=error_event,
        next_event=({**head, "object": "chat.completion.chunk", "choices": [choice]}, None),
    )
