"""Anthropic Messages API: request validation, cache accounting and response shapes.

Shapes follow the real API closely enough that ``anthropic.AsyncAnthropic`` parses them, including
``messages.stream()`` accumulation: the event order is message_start, content_block_start,
content_block_delta*, content_block_stop (per block), message_delta, message_stop.
"""

from __future__ import annotations

from typing import Any

from .blocks import RequestInvalid, anthropic_layout
from .cache import MIN_CACHE_TOKENS, AnthropicUsage, layout_prefixes
from .records import RecordedRequest, anthropic_system_json, tools_json
from .script import (
    AnswerFault,
    HttpFault,
    Reply,
    StallFault,
    ToolUse,
    anthropic_stop_reason,
    broken_answer,
    fit_reply,
    output_tokens,
)
from .state import EmulatorState
from .tokens import count_markers_in, is_marker
from .wire import Outcome, chunks, dumps, retry_after_header, sse

API = "anthropic"

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
ERROR_MESSAGES = {
    "rate_limit_error": "This request would exceed the rate limit for your organization. (emulated)",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
    "timeout_error": "Request timed out",
}


def error_type_for(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_outcome(
    state: EmulatorState, status: int, message: str | None = None, retry_after: float | None = None
) -> Outcome:
    """The real error body: ``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    kind = error_type_for(status)
    request_id = state.next_id("req_emu_")
    body = {
        "type": "error",
        "error": {"type": kind, "message": message or ERROR_MESSAGES.get(kind, f"Error {status}")},
        "request_id": request_id,
    }
    return Outcome(status, body, headers={"request-id": request_id, **retry_after_header(retry_after)})


def model_list() -> dict[str, Any]:
    """``GET /v1/models``: the Claude families the emulator knows (it answers any name)."""
    data = [
        {"type": "model", "id": name, "display_name": name, "created_at": "2025-01-01T00:00:00Z"}
        for name in MIN_CACHE_TOKENS
    ]
    return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}


def _begin(path: str, raw: bytes, body: dict[str, Any]) -> RecordedRequest:
    top = 1 if is_marker(body.get("cache_control")) else 0
    return RecordedRequest(
        api=API,
        path=path,
        model=str(body.get("model", "")),
        stream=bool(body.get("stream")),
        body=raw,
        json=body,
        system_json=anthropic_system_json(body),
        tools_json=tools_json(body),
        breakpoints=count_markers_in(body.get("tools"), body.get("system"), body.get("messages")) + top,
    )


def _validate(body: dict[str, Any], count_only: bool = False) -> None:
    if not isinstance(body.get("model"), str):
        raise RequestInvalid("model: Field required")
    if not isinstance(body.get("messages"), list):
        raise RequestInvalid("messages: Field required")
    if not count_only and not isinstance(body.get("max_tokens"), int):
        raise RequestInvalid("max_tokens: Field required")


def _fail(state: EmulatorState, rec: RecordedRequest, out: Outcome) -> Outcome:
    err = out.body["error"]
    rec.status, rec.error = out.status, f"{err['type']}: {err['message']}"
    state.record(rec)
    return out


def count_tokens(state: EmulatorState, path: str, raw: bytes, body: dict[str, Any]) -> Outcome:
    """``POST /v1/messages/count_tokens`` -> ``{"input_tokens": N}`` (never faulted)."""
    with state.lock:
        rec = _begin(path, raw, body)
        try:
            _validate(body, count_only=True)
            layout = anthropic_layout(body)
        except RequestInvalid as exc:
            return _fail(state, rec, error_outcome(state, 400, str(exc)))
        rec.prompt_tokens = rec.input_tokens = layout.total_tokens
        state.record(rec)
        return Outcome(200, {"input_tokens": layout.total_tokens})


def messages(state: EmulatorState, path: str, raw: bytes, body: dict[str, Any]) -> Outcome:
    """``POST /v1/messages``: faults, validation, cache accounting, reply, response shape."""
    with state.lock:
        rec = _begin(path, raw, body)
        early = state.faults.take(API, rec.stream, early=True, model=rec.model, now=state.clock.now())
        if isinstance(early, HttpFault):
            return _fail(state, rec, error_outcome(state, early.status, retry_after=early.retry_after))
        if isinstance(early, StallFault):
            out = _fail(state, rec, error_outcome(state, 504))
            rec.error, out.hold = early.describe(), early.seconds
            return out
        try:
            _validate(body)
            layout = anthropic_layout(body)
            window = state.context_window(rec.model)
            rec.prompt_tokens = layout.total_tokens
            if layout.total_tokens > window:
                raise RequestInvalid(f"prompt is too long: {layout.total_tokens} tokens > {window} maximum")
        except RequestInvalid as exc:
            return _fail(state, rec, error_outcome(state, 400, str(exc)))
        rec.breakpoints = layout.markers
        min_tokens = state.min_tokens(rec.model)
        prefixes = layout_prefixes(layout)
        rec.oracle_tokens = state.oracle.best(prefixes, min_tokens)
        usage = state.anthropic_cache.apply(layout, min_tokens, state.clock.now())
        state.oracle.add(prefixes)
        rec.cache_read, rec.cache_write, rec.cache_write_1h = usage.read, usage.write, usage.write_1h
        rec.input_tokens = usage.uncached

        max_tokens = int(body["max_tokens"])
        fault = state.faults.take(API, rec.stream, early=False, model=rec.model, now=state.clock.now())
        if isinstance(fault, AnswerFault):
            reply = Reply(text=fault.after_text)
        elif max_tokens <= 0:
            reply = Reply()  # a cache pre-warm: nothing generated, no scripted reply consumed
        else:
            reply = state.next_reply(body, API)
        text, calls, cut = fit_reply(reply, max_tokens)
        stop = "max_tokens" if cut or max_tokens <= 0 else _stop_reason(reply, calls)
        content = _content(state, text, calls)
        rec.output_tokens = output_tokens(text, calls)
        rec.reply_text = text
        message = {
            "id": state.next_id("msg_emu_"),
            "type": "message",
            "role": "assistant",
            "model": rec.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage_json(usage, rec.output_tokens),
        }
        if isinstance(fault, AnswerFault):
            rec.error = fault.describe()
            state.record(rec)
            return _faulty_answer(message, fault, rec.stream)
        state.record(rec)
        if rec.stream:
            return Outcome(200, events=stream_events(message))
        return Outcome(200, message)


def _stop_reason(reply: Reply, calls: list[ToolUse]) -> str:
    if reply.stop_reason:
        return anthropic_stop_reason(reply.stop_reason)
    return "tool_use" if calls else "end_turn"


def _content(state: EmulatorState, text: str, calls: list[ToolUse]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for call in calls:
        call_id = call.id or state.next_id("toolu_emu_")
        content.append({"type": "tool_use", "id": call_id, "name": call.name, "input": call.arguments})
    return content


def usage_json(usage: AnthropicUsage, output: int) -> dict[str, Any]:
    """Usage exactly in the API's shape (total input = input + creation + read)."""
    return {
        "input_tokens": usage.uncached,
        "cache_creation_input_tokens": usage.write,
        "cache_read_input_tokens": usage.read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.write_5m,
            "ephemeral_1h_input_tokens": usage.write_1h,
        },
        "output_tokens": output,
        "service_tier": "standard",
    }


def _event(data: dict[str, Any]) -> bytes:
    """An Anthropic SSE event: the ``event:`` name is the payload's ``type``."""
    return sse(data, str(data["type"]))


def _start_event(message: dict[str, Any]) -> bytes:
    usage = dict(message["usage"])
    usage["output_tokens"] = min(1, usage["output_tokens"])
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    return _event({"type": "message_start", "message": start})


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    if block["type"] == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in chunks(block["text"])]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        pieces = ["", *chunks(dumps(block["input"]), 16)]
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
    return [
        _event({"type": "content_block_start", "index": index, "content_block": start}),
        *(_event({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas),
        _event({"type": "content_block_stop", "index": index}),
    ]


def stream_events(message: dict[str, Any]) -> list[bytes]:
    """The full SSE sequence for a finished message."""
    events = [_start_event(message)]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block))
        if index == 0:
            events.append(_event({"type": "ping"}))
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage = {k: message["usage"][k] for k in keys}  # cumulative, as the API sends them
    events.append(_event({"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(_event({"type": "message_stop"}))
    return events


def _partial_events(message: dict[str, Any], text: str) -> list[bytes]:
    """message_start and ``text`` in an unfinished first block: an answer broken off early."""
    events = [_start_event(message)]
    if text:
        events.extend(_block_events(0, {"type": "text", "text": text})[:-1])
    return events


def _faulty_answer(message: dict[str, Any], fault: AnswerFault, stream: bool) -> Outcome:
    """The answer ``message`` (whose text is the fault's ``after_text``) as ``fault`` breaks it."""

    def error_event(kind: str) -> bytes:
        return _event({"type": "error", "error": {"type": kind, "message": ERROR_MESSAGES.get(kind, kind)}})

    more = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "more"}}
    return broken_answer(
        fault,
        stream,
        document=message,
        partial=_partial_events(message, fault.after_text),
        error_event=error_event,
        next_event=(more, "content_block_delta"),
    )
