"""Anthropic Messages API through the ``anthropic`` SDK, streaming, with placed cache breakpoints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import anthropic

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
from agent.model.wire import anthropic_block
from agent.providers.errors import incomplete_stream, provider_failures
from agent.usage import Usage


class AnthropicProvider(Provider):
    api = "anthropic"

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        name: str = "anthropic",
    ) -> None:
        self.name = name
        self.model = model
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )

    async def close(self) -> None:
        await self._client.close()

    def wire_message(self, message: Message) -> dict[str, Any]:
        if message.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.media:  # a screenshot: text first, then the images, inside the result
                block["content"] = [
                    {"type": "text", "text": message.content or "(no text)"},
                    *(anthropic_block(media) for media in message.media),
                ]
            if message.is_error:
                block["is_error"] = True
            return block
        if message.role == "assistant":
            content: list[dict[str, Any]] = []
            if message.content:
                content.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                content.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                )
            if not content:
                content.append({"type": "text", "text": "(no text)"})
            return {"role": "assistant", "content": content}
        files = [anthropic_block(media) for media in message.media]
        if files and not message.content:
            return {"role": "user", "content": files}
        return {
            "role": "user",
            "content": [*files, {"type": "text", "text": message.content or "(empty message)"}],
        }

    def build_body(self, request: ProviderRequest, *, with_files: bool = True) -> dict[str, Any]:
        """The request body, markers applied. Pure apart from reading stored payloads."""
        tools = [dict(tool) for tool in request.tools]
        layers = request.system.layers()
        system = [{"type": "text", "text": text} for _, text in layers]
        fragment = self.wire_fragment if with_files else self.stored_fragment
        messages = group_wire_messages(request.messages, fragment)
        shape = PromptShape(
            tool_count=len(tools),
            system_layers=tuple(name for name, _ in layers),
            message_roles=tuple(m["role"] for m in messages),
            task_appended=request.task_appended,
        )
        points = place_breakpoints(shape, request.cache_policy, request.prefix_ttl, request.tail_ttl)
        apply_breakpoints(tools, system, messages, points)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "system": system,
            "messages": messages,
        }
        if tools:
            body["tools"] = tools
        return body

    async def complete(
        self,
        request: ProviderRequest,
        on_text: TextCallback | None = None,
        progress: StreamProgress | None = None,
    ) -> ProviderResponse:
        with provider_failures(anthropic, self.name, [self._client.api_key]):
            return await self._stream(request, on_text, progress)

    async def _stream(
        self, request: ProviderRequest, on_text: TextCallback | None, progress: StreamProgress | None
    ) -> ProviderResponse:
        body = self.build_body(request)
        reply = StreamedReply(progress)
        usage: dict[str, Any] = {}
        stop_reason = "end_turn"
        stopped = False  # message_stop seen: without it the answer was cut off, however it ended
        if progress is not None:
            progress.begin()
        stream = await self._client.messages.create(stream=True, **body)
        async with stream:  # closed at once on cancellation or error, not left to the garbage collector
            async for event in stream:
                await asyncio.sleep(0)  # one event per turn of the loop: a buffered stream never hogs it
                if event.type == "message_start":
                    usage = event.message.usage.model_dump()
                    if progress is not None:  # what the request costs is known now, before any output
                        progress.reported = normalize_usage(usage)
                elif event.type == "content_block_start" and event.content_block.type == "tool_use":
                    call = reply.call(event.index)
                    call["id"], call["name"] = event.content_block.id, event.content_block.name
                elif event.type == "content_block_delta":
                    if event.delta.type == "text_delta":
                        text = reply.add_text(event.delta.text)
                        if on_text is not None:
                            await on_text(text)
                    elif event.delta.type == "input_json_delta" and event.index in reply.calls:
                        reply.call(event.index)["json"] += event.delta.partial_json
                elif event.type == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    usage["output_tokens"] = event.usage.output_tokens
                elif event.type == "message_stop":
                    stopped = True
        if not stopped:
            raise incomplete_stream("message_stop")
        return reply.response(stop_reason, normalize_usage(usage))


    # -- Message Batches -----------------------------------------------------------------------------

    async def submit_batch(self, request: ProviderRequest, custom_id: str) -> str:
        params = self.build_body(request)  # the body a normal request sends (it streams by a flag beside it)
        try:
            with provider_failures(anthropic, self.name, [self._client.api_key]):
                batch = await self._client.messages.batches.create(
                    requests=[{"custom_id": custom_id, "params": params}]  # type: ignore[typeddict-item]
                )
        except ProviderError as error:
            if error.status == 404:
                raise BatchUnsupported(f"{self.name} has no message batches here ({error})") from None
            raise
        return batch.id

    async def batch_ended(self, batch_id: str) -> bool:
        with provider_failures(anthropic, self.name, [self._client.api_key]):
            batch = await self._client.messages.batches.retrieve(batch_id)
        return batch.processing_status == "ended"

    async def batch_result(self, batch_id: str, custom_id: str) -> BatchAnswer:
        with provider_failures(anthropic, self.name, [self._client.api_key]):
            results = await self._client.messages.batches.results(batch_id)
            async for item in results:
                if item.custom_id != custom_id:
                    continue
                result = item.result
                if result.type == "succeeded":
                    return message_response(result.message.model_dump())
                if result.type == "errored":
                    error = result.error.error
                    return BatchFailed(f"errored: {error.type}: {error.message}")
                return BatchFailed(result.type)
        return BatchFailed(f"batch {batch_id} has no result for {custom_id}")

    async def cancel_batch(self, batch_id: str) -> None:
        with provider_failures(anthropic, self.name, [self._client.api_key]):
            await self._client.messages.batches.cancel(batch_id)


def message_response(message: dict[str, Any]) -> ProviderResponse:
    """A whole (not streamed) message as the streamed answer would have given it."""
    reply = StreamedReply()
    for index, block in enumerate(message.get("content") or []):
        if block.get("type") == "text":
            reply.add_text(block.get("text") or "")
        elif block.get("type") == "tool_use":
            call = reply.call(index)
            call["id"], call["name"] = block["id"], block["name"]
            call["json"] = json.dumps(block.get("input") or {}, ensure_ascii=False, separators=(",", ":"))
    usage = normalize_usage(message.get("usage") or {})
    return reply.response(message.get("stop_reason") or "end_turn", usage)


def group_wire_messages(messages: Sequence[Message], fragment: Any) -> list[dict[str, Any]]:
    """Wire messages in order; consecutive tool results become one user message of tool_result blocks."""
    wire: list[dict[str, Any]] = []
    pending_results: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            pending_results.append(fragment(message))
            continue
        if pending_results:
            wire.append({"role": "user", "content": pending_results})
            pending_results = []
        wire.append(fragment(message))
    if pending_results:
        wire.append({"role": "user", "content": pending_results})
    return wire


def _marker(point: Breakpoint) -> dict[str, str]:
    return {"type": "ephemeral"} if point.ttl == "5m" else {"type": "ephemeral", "ttl": "1h"}


def apply_breakpoints(
    tools: list[dict[str, Any]],
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    points: Sequence[Breakpoint],
) -> None:
    """Put ``cache_control`` on copies of the chosen blocks; stored payloads are never mutated."""
    for point in points:
        if point.target == "tool":
            tools[point.index] = {**tools[point.index], "cache_control": _marker(point)}
        elif point.target == "system":
            system[point.index] = {**system[point.index], "cache_control": _marker(point)}
        else:
            message = messages[point.index]
            content = list(message["content"])
            content[-1] = {**content[-1], "cache_control": _marker(point)}
            messages[point.index] = {**message, "content": content}


def normalize_usage(raw: dict[str, Any]) -> Usage:
    creation = raw.get("cache_creation") or {}
    write_5m = int(creation.get("ephemeral_5m_input_tokens") or 0)
    write_1h = int(creation.get("ephemeral_1h_input_tokens") or 0)
    total_write = int(raw.get("cache_creation_input_tokens") or 0)
    if write_5m + write_1h < total_write:  # older responses without the TTL split
        write_5m = total_write - write_1h
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(raw.get("cache_read_input_tokens") or 0),
        cache_write_5m_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
    )
