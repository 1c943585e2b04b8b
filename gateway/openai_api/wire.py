"""The Chat Completions wire format: a request read into what Herald needs, answers and errors written
the way OpenAI's own API writes them (pure; no I/O).

Reading is strict where silence would mislead and lenient where it would not:

- every field of OpenAI's Chat Completions request is known; one that is not (a typo, another API's
  field) is a 400 naming it;
- sampling settings (``temperature``, ``max_tokens``, ``stop`` ...) are accepted and ignored: the
  session's model and settings are Herald's (a conversation's prompt and settings are fixed for the
  cache's sake);
- what Herald cannot do is refused with one sentence: client-side tools (Herald runs its own, on the
  server), more than one choice, forced response formats, log probabilities, audio, and images or files
  in messages (text only).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.api import Usage
from gateway.openai_api.transcript import NotAConversation, Transcript, Turn, transcript

# Accepted and ignored: the session's own model settings decide (docs/openai-api.md).
IGNORED = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "presence_penalty", "frequency_penalty",
    "logit_bias", "seed", "stop", "user", "store", "service_tier", "prompt_cache_key",
    "prompt_cache_retention", "reasoning_effort", "verbosity", "safety_identifier", "parallel_tool_calls",
    "prediction", "web_search_options",
    "top_k", "min_p", "repetition_penalty",  # common extensions of OpenAI-compatible servers
})  # fmt: skip
KNOWN = IGNORED | {
    "model", "messages", "stream", "stream_options", "n", "tools", "functions", "tool_choice",
    "function_call", "response_format", "logprobs", "top_logprobs", "modalities", "audio", "metadata",
}  # fmt: skip
CLIENT_TOOLS = (
    "Herald runs its own tools on the server and answers with text; tools a client defines ({field}) are "
    "not supported."
)
MAX_CONVERSATION_ID = 256


class ApiError(Exception):
    """A request answered with an error in OpenAI's format: ``status`` and the body's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass(frozen=True)
class ChatRequest:
    """What Herald takes from a Chat Completions request."""

    model: str
    transcript: Transcript
    stream: bool
    include_usage: bool
    conversation: str | None  # ``metadata.conversation_id``, when given


def parse_request(body: bytes, model_name: str) -> ChatRequest:
    """Read a request body; raises :class:`ApiError` (400, or 404 for another model) saying what is wrong."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_request(f"The request body is not valid JSON ({error}).") from None
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.")
    unknown = sorted(set(data) - KNOWN)
    if unknown:
        raise bad_request(
            f"Unknown field {', '.join(repr(name) for name in unknown)} in a Chat Completions request.",
            param=unknown[0],
        )
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required: the name of the model, as /v1/models lists it.", "model")
    if model != model_name:
        raise ApiError(
            404,
            f"The model '{model}' does not exist: this server offers '{model_name}'.",
            code="model_not_found",
            param="model",
        )
    _refuse_what_herald_cannot_do(data)
    stream = _flag(data, "stream")
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request(
            "'stream_options' must be an object such as {\"include_usage\": true}.", "stream_options"
        )
    include_usage = bool(options and options.get("include_usage") is True)
    return ChatRequest(
        model, _conversation_of(data.get("messages")), stream, include_usage, _metadata_id(data)
    )


def _flag(data: Mapping[str, Any], name: str) -> bool:
    value = data.get(name)
    if value is not None and not isinstance(value, bool):
        raise bad_request(f"'{name}' must be true or false.", name)
    return bool(value)


def _refuse_what_herald_cannot_do(data: Mapping[str, Any]) -> None:
    for field in ("tools", "functions"):
        if data.get(field):
            raise bad_request(CLIENT_TOOLS.format(field=field), field)
    for field in ("tool_choice", "function_call"):
        if data.get(field) not in (None, "none", "auto"):
            raise bad_request(CLIENT_TOOLS.format(field=field), field)
    n = data.get("n")
    if n is not None and n != 1:
        raise bad_request("Herald gives one answer per request: 'n' must be 1.", "n")
    response_format = data.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise bad_request(
            "Herald answers in text and cannot force a response format (json_object, json_schema).",
            "response_format",
        )
    if data.get("logprobs") or data.get("top_logprobs"):
        raise bad_request("Herald does not report log probabilities.", "logprobs")
    if data.get("audio") or data.get("modalities") not in (None, ["text"]):
        raise bad_request("Herald answers in text only: audio output is not supported.", "modalities")


def _metadata_id(data: Mapping[str, Any]) -> str | None:
    metadata = data.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise bad_request("'metadata' must be an object of strings.", "metadata")
    value = metadata.get("conversation_id")
    return conversation_id(value, "metadata.conversation_id") if value is not None else None


def conversation_id(value: object, where: str) -> str:
    """A client's conversation id as given in ``where``; a 400 when it is not a short line of text."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_CONVERSATION_ID
        or not value.isprintable()
    ):
        raise bad_request(
            f"{where} must be a conversation id: text of 1 to {MAX_CONVERSATION_ID} printable characters.",
            where,
        )
    return value.strip()


def _conversation_of(messages: object) -> Transcript:
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of messages.", "messages")
    instructions: list[str] = []
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object with a role and a content.", where)
        role = message.get("role")
        if role in ("tool", "function") or message.get("tool_calls") or message.get("function_call"):
            raise bad_request(CLIENT_TOOLS.format(field=f"{where}: a tool call or result"), where)
        text = _text_of(message.get("content"), where, nullable=role == "assistant")
        if role in ("system", "developer"):
            if turns:
                raise bad_request(
                    f"{where} is a {role} message after the conversation started: system messages must "
                    "come first (Herald keeps them with the conversation's prompt).",
                    where,
                )
            instructions.append(text)
        elif role in ("user", "assistant"):
            turns.append(Turn(role, text))
        else:
            raise bad_request(
                f"{where} has the role {role!r}; Herald takes system, developer, user and assistant.", where
            )
    try:
        return transcript(instructions, turns)
    except NotAConversation as error:
        raise bad_request(str(error), "messages") from None


def _text_of(content: object, where: str, *, nullable: bool) -> str:
    """The text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if content is None and nullable:
        return ""
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be text or a list of text parts.", f"{where}.content")
    texts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "refusal") and isinstance(part.get(kind), str):
            texts.append(part[kind])
        elif kind in ("image_url", "input_audio", "file"):
            raise bad_request(
                f"{where} has a part of type {kind}: Herald's API takes text only (send files in a chat "
                "with the bot instead).",
                f"{where}.content",
            )
        else:
            raise bad_request(f"{where}.content has a part that is not text.", f"{where}.content")
    return "".join(texts)


# -- answers ------------------------------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{secrets.token_hex(12)}"


def usage_body(usage: Usage) -> dict[str, Any]:
    """A turn's usage as OpenAI reports it: every input token the turn's requests read (from the cache
    or not), and what of it the cache served."""
    prompt = usage.prompt_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def completion(
    answer_id: str, model: str, text: str, usage: Usage, created: int | None = None
) -> dict[str, Any]:
    """A whole answer (``stream`` false)."""
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": created if created is not None else int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage_body(usage),
        "system_fingerprint": None,
    }


@dataclass(frozen=True)
class Chunks:
    """The chunks of one streamed answer (``stream`` true), as SSE ``data:`` lines."""

    answer_id: str
    model: str
    created: int
    include_usage: bool

    def _chunk(self, choices: Sequence[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.answer_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": list(choices),
        }
        if self.include_usage:
            chunk["usage"] = usage
        return event(chunk)

    def _delta(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

    def start(self) -> bytes:
        return self._delta({"role": "assistant", "content": ""})

    def text(self, text: str) -> bytes:
        return self._delta({"content": text})

    def finish(self) -> bytes:
        return self._delta({}, "stop")

    def usage(self, usage: Usage) -> bytes:
        """The last chunk with ``stream_options.include_usage``: no choices, the turn's usage."""
        return self._chunk([], usage_body(usage))


DONE = b"data: [DONE]\n\n"
KEEP_ALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it, proxies see the stream is alive


def event(data: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


OWNER = "herald"  # who owns the model, as /v1/models says, without bots: (with them: the key's bot)


def models_body(model_name: str, created: int, owner: str = OWNER) -> dict[str, Any]:
    return {"object": "list", "data": [model_body(model_name, created, owner)]}


def model_body(model_name: str, created: int, owner: str = OWNER) -> dict[str, Any]:
    return {"id": model_name, "object": "model", "created": created, "owned_by": owner}
