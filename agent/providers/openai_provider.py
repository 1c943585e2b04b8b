"""OpenAI Chat Completions (and compatible APIs: OpenRouter, DeepSeek, local servers) via ``openai``.

Caching there is automatic on the prompt prefix; what we control is byte-stable prefixes and routing:
``prompt_cache_key`` = the session id, so a session's requests land where its cache is. Claude models
behind OpenRouter also take Anthropic-style ``cache_control`` markers on content parts, placed by the
same policy as the Anthropic provider.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

import openai

from agent.cache_policy import Breakpoint, PromptShape, place_breakpoints
from agent.model.messages import Message
from agent.model.provider import (
    BatchAnswer,
    BatchFailed,
    BatchUnsupported,
    Provider,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamedReply,
    StreamProgress,
    TextCallback,
)
from agent.model.wire import openai_part
from agent.models import max_tokens_field
from agent.providers.errors import incomplete_stream, missing_v1_hint, provider_failures
from agent.usage import Usage


def is_claude_model(model: str) -> bool:
    return "claude" in model.lower()


class OpenAIProvider(Provider):
    api = "openai"

    def __init__(
        self, *, model: str, api_key: str | None, base_url: str | None, timeout: float, name: str = "openai"
    ) -> None:
        self.name = name
        self.model = model
        self._markers = is_claude_model(model)
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    async def close(self) -> None:
        await self._client.close()

    def _text(self, text: str) -> Any:
        # Claude behind OpenRouter needs content parts to carry cache_control; always use parts for
        # those models so a marker never changes a message's shape (and so its bytes) between requests.
        return [{"type": "text", "text": text}] if self._markers else text

    def wire_message(self, message: Message) -> dict[str, Any]:
        if message.role == "tool":
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": self._text(tool_text(message)),
            }
        if message.role == "assistant":
            wire: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                wire["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json},
                    }
                    for call in message.tool_calls
                ]
            return wire
        if message.media:  # files need content parts whatever the model
            parts = [openai_part(media) for media in message.media]
            text = [{"type": "text", "text": message.content}] if message.content else []
            return {"role": "user", "content": [*parts, *text]}
        return {"role": "user", "content": self._text(message.content or "(empty message)")}

    def build_body(self, request: ProviderRequest, *, with_files: bool = True) -> dict[str, Any]:
        layers = request.system.layers()
        fragment = self.wire_fragment if with_files else self.stored_fragment
        if self._markers:
            system: dict[str, Any] = {
                "role": "system",
                "content": [{"type": "text", "text": text} for _, text in layers],
            }
        else:
            system = {"role": "system", "content": request.system.text()}
        messages = [system] + [fragment(m) for m in request.messages]
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool["description"],
                    "parameters": tool["input_schema"],
                },
            }
            for tool in request.tools
        ]
        if self._markers:
            shape = PromptShape(
                tool_count=0,
                system_layers=tuple(name for name, _ in layers),
                message_roles=tuple(
                    "assistant" if m["role"] == "assistant" else "user" for m in messages[1:]
                ),
                task_appended=request.task_appended,
            )
            points = place_breakpoints(shape, request.cache_policy, request.prefix_ttl, request.tail_ttl)
            _apply_part_markers(messages, points)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "prompt_cache_key": request.session_id,
        }
        body[max_tokens_field(self.model)] = request.max_tokens
        if tools:
            body["tools"] = tools
        return body

    async def complete(
        self,
        request: ProviderRequest,
        on_text: TextCallback | None = None,
        progress: StreamProgress | None = None,
    ) -> ProviderResponse:
        try:
            with provider_failures(openai, self.name, [self._client.api_key]):
                return await self._stream(request, on_text, progress)
        except ProviderError as error:
            hint = missing_v1_hint(str(self._client.base_url)) if error.status == 404 else None
            if hint is not None:
                error.args = (f"{error} ({hint})",)
            raise

    async def _stream(
        self, request: ProviderRequest, on_text: TextCallback | None, progress: StreamProgress | None
    ) -> ProviderResponse:
        body = self.build_body(request)
        reply = StreamedReply(progress)
        usage: Any = None
        # The SDK swallows [DONE] and ends quietly at any end of body, so the finish_reason is the
        # terminal event we can see: a stream without one was cut off, however it ended.
        finish_reason: str | None = None
        if progress is not None:
            progress.begin()
        stream = await self._client.chat.completions.create(**body)
        async with stream:  # closed at once on cancellation or error, not left to the garbage collector
            async for chunk in stream:
                await asyncio.sleep(0)  # one chunk per turn of the loop: a buffered stream never hogs it
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        text = reply.add_text(delta.content)
                        if on_text is not None:
                            await on_text(text)
                    for piece in delta.tool_calls or []:
                        call = reply.call(piece.index)
                        call["id"] = piece.id or call["id"]
                        if piece.function is not None:
                            call["name"] += piece.function.name or ""
                            call["json"] += piece.function.arguments or ""
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        if finish_reason is None:
            raise incomplete_stream("a finish_reason")
        return reply.response(finish_reason, normalize_usage(usage))


    # -- the Batch API -----------------------------------------------------------------------------

    async def submit_batch(self, request: ProviderRequest, custom_id: str) -> str:
        body = self.build_body(request)
        for transport in BATCH_DROPS:  # a batch is answered whole: the rest is the normal request's body
            body.pop(transport, None)
        line = {"custom_id": custom_id, "method": "POST", "url": BATCH_ENDPOINT, "body": body}
        data = json.dumps(line, ensure_ascii=False).encode() + b"\n"
        try:
            with provider_failures(openai, self.name, [self._client.api_key]):
                upload = await self._client.files.create(
                    file=("herald-batch.jsonl", data, "application/jsonl"), purpose="batch"
                )
                batch = await self._client.batches.create(
                    input_file_id=upload.id, endpoint=BATCH_ENDPOINT, completion_window="24h"
                )
        except ProviderError as error:
            if error.status == 404:
                raise BatchUnsupported(f"{self.name} has no batch API here ({error})") from None
            raise
        return batch.id

    async def batch_ended(self, batch_id: str) -> bool:
        with provider_failures(openai, self.name, [self._client.api_key]):
            batch = await self._client.batches.retrieve(batch_id)
        return batch.status in BATCH_ENDED

    async def batch_result(self, batch_id: str, custom_id: str) -> BatchAnswer:
        with provider_failures(openai, self.name, [self._client.api_key]):
            batch = await self._client.batches.retrieve(batch_id)
            for file_id in (batch.output_file_id, batch.error_file_id):
                if not file_id:
                    continue
                content = await self._client.files.content(file_id)
                for raw in content.text.splitlines():
                    line = json.loads(raw) if raw.strip() else {}
                    if line.get("custom_id") == custom_id:
                        return _batch_line(line)
        return BatchFailed(f"{batch.status}: batch {batch_id} has no result for {custom_id}")

    async def cancel_batch(self, batch_id: str) -> None:
        with provider_failures(openai, self.name, [self._client.api_key]):
            await self._client.batches.cancel(batch_id)


BATCH_ENDPOINT: Final = "/v1/chat/completions"
BATCH_DROPS = ("stream", "stream_options")  # how the answer travels, not what is asked
BATCH_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


def _batch_line(line: dict[str, Any]) -> BatchAnswer:
    """One line of a batch's output (or error) file."""
    response = line.get("response") or {}
    if line.get("error") or response.get("status_code") != 200:
        error = line.get("error") or (response.get("body") or {}).get("error") or {}
        return BatchFailed(f"errored: {error.get('code') or error.get('type')}: {error.get('message')}")
    completion = openai.types.chat.ChatCompletion.model_validate(response["body"])
    reply = StreamedReply()
    choice = completion.choices[0]
    reply.add_text(choice.message.content or "")
    for index, call in enumerate(choice.message.tool_calls or []):
        function = getattr(call, "function", None)
        if function is not None:
            reply.calls[index] = {"id": call.id, "name": function.name, "json": function.arguments}
    return reply.response(choice.finish_reason or "stop", normalize_usage(completion.usage))


def _apply_part_markers(messages: list[dict[str, Any]], points: tuple[Breakpoint, ...]) -> None:
    for point in points:
        if point.target == "system":
            index, part = 0, point.index
        elif point.target == "message":
            index, part = point.index + 1, -1
        else:
            continue
        message = messages[index]
        content = message.get("content")
        if not isinstance(content, list) or not content:
            continue  # an assistant message with only tool calls: nothing to mark
        content = list(content)
        marker = {"type": "ephemeral"} if point.ttl == "5m" else {"type": "ephemeral", "ttl": "1h"}
        content[part] = {**content[part], "cache_control": marker}
        messages[index] = {**message, "content": content}


def _field(obj: Any, name: str) -> int:
    if obj is None:
        return 0
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return int(value or 0)


def normalize_usage(usage: Any) -> Usage:
    """Usage from OpenAI, DeepSeek (``prompt_cache_hit_tokens``) and OpenRouter (``cache_write_tokens``)."""
    if usage is None:
        return Usage()
    prompt = _field(usage, "prompt_tokens")
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _field(details, "cached_tokens") or _field(usage, "prompt_cache_hit_tokens")
    written = _field(details, "cache_write_tokens")
    return Usage(
        input_tokens=max(0, prompt - cached - written),
        output_tokens=_field(usage, "completion_tokens"),
        cache_read_tokens=cached,
        cache_write_5m_tokens=written,
    )


def tool_text(message: Message) -> str:
    """A tool result's text; Chat Completions takes no image in a tool message, so each is named instead."""
    unseen = [f"{media.label()} (not shown: this API takes images in tool results only from Anthropic)"
              for media in message.media]
    return "\n".join([message.content, *unseen]) if unseen else message.content
