"""The batch APIs: Anthropic Message Batches and OpenAI Batch (with its Files), answered like the real ones.

A batch is processed when it ends, each request through the very handler of the normal endpoint
(``anthropic_api.messages``, ``openai_api.chat_completions``), so it reads and writes the same prompt
cache at that moment of the emulated clock, consumes scripted replies and is recorded (``path`` is the
batch endpoint's: :data:`BATCH_PATHS`). Anthropic's answers carry ``usage.service_tier: "batch"``; an
OpenAI batch carries its ``usage`` (with cached tokens) on the batch object.

When a batch ends: after :attr:`EmulatorState.batch_delay` seconds of the emulated clock from its creation
(0: at its first poll; None: only on :meth:`EmulatorState.end_batches`). ``expire_batches`` ends the
batches in progress with every request expired, as a provider does after 24 hours.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from . import anthropic_api, openai_api
from .state import EmulatorState
from .wire import Outcome, dumps

ANTHROPIC_PATH = "/v1/messages/batches"
OPENAI_PATH = "/v1/batches"
BATCH_PATHS = (ANTHROPIC_PATH, OPENAI_PATH)
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # the emulated clock's 0
DAY = 86_400.0


@dataclass
class Batch:
    id: str
    api: str  # "anthropic" | "openai"
    requests: list[tuple[str, dict[str, Any]]]  # (custom_id, params or body)
    created_at: float
    ends_at: float | None  # emulated clock; None: held until end_batches()
    state: str = "in_progress"  # in_progress | canceling | ended
    outcome: str = "succeeded"  # for every request when it ends: succeeded | canceled | expired
    results: list[dict[str, Any]] = field(default_factory=list)  # result lines, once ended
    ended_at: float | None = None
    input_file_id: str = ""
    output_file_id: str | None = None
    error_file_id: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


def _time(seconds: float) -> str:
    return (EPOCH + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _new(state: EmulatorState, api: str, prefix: str, requests: list[tuple[str, dict[str, Any]]]) -> Batch:
    now = state.clock.now()
    delay = state.batch_delay
    batch = Batch(state.next_id(prefix), api, requests, now, None if delay is None else now + delay)
    state.batches[batch.id] = batch
    return batch


def _settle(state: EmulatorState, batch: Batch) -> None:
    """End ``batch`` if its time came: process every request now (lock held)."""
    if batch.state == "ended":
        return
    due = batch.ends_at is not None and state.clock.now() >= batch.ends_at
    if not (due or batch.state == "canceling" or batch.outcome != "succeeded"):
        return
    outcome = batch.outcome = "canceled" if batch.state == "canceling" else batch.outcome
    for custom_id, params in batch.requests:
        if outcome != "succeeded":
            batch.results.append(_not_done(batch.api, custom_id, outcome))
        elif batch.api == "anthropic":
            batch.results.append(_anthropic_result(state, custom_id, params))
        else:
            batch.results.append(_openai_line(state, batch, custom_id, params))
    batch.state, batch.ended_at = "ended", state.clock.now()
    if batch.api == "openai":
        done = [line for line in batch.results if line["error"] is None]
        failed = [line for line in batch.results if line["error"] is not None]
        if done:
            batch.output_file_id = _file(state, done)
        if failed:
            batch.error_file_id = _file(state, failed)


def _not_done(api: str, custom_id: str, outcome: str) -> dict[str, Any]:
    if api == "anthropic":
        return {"custom_id": custom_id, "result": {"type": outcome}}
    code = "batch_expired" if outcome == "expired" else "batch_cancelled"
    error = {"code": code, "message": f"This request was not run: the batch was {outcome}."}
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": None, "error": error}


def _anthropic_result(state: EmulatorState, custom_id: str, params: dict[str, Any]) -> dict[str, Any]:
    if params.get("stream"):
        error = {"type": "invalid_request_error", "message": "stream: not supported in a message batch"}
        errored = {"type": "errored", "error": {"type": "error", "error": error}}
        return {"custom_id": custom_id, "result": errored}
    out = anthropic_api.messages(state, ANTHROPIC_PATH, dumps(params).encode(), params)
    if out.status != 200:
        return {"custom_id": custom_id, "result": {"type": "errored", "error": out.body}}
    message = dict(out.body)
    message["usage"] = {**message["usage"], "service_tier": "batch"}
    return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


def _openai_line(state: EmulatorState, batch: Batch, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    request_id = state.next_id("req_emu_")
    if body.get("stream"):
        out = openai_api.error_outcome(400, "Streaming is not supported in a batch.")
    else:
        out = openai_api.chat_completions(state, OPENAI_PATH, dumps(body).encode(), body)
    line: dict[str, Any] = {"id": state.next_id("batch_req_emu_"), "custom_id": custom_id, "error": None}
    line["response"] = {"status_code": out.status, "request_id": request_id, "body": out.body}
    if out.status != 200:
        line["error"] = out.body["error"]
        return line
    usage = out.body["usage"]
    for name, value in (
        ("input_tokens", usage["prompt_tokens"]),
        ("output_tokens", usage["completion_tokens"]),
        ("cached_tokens", usage["prompt_tokens_details"]["cached_tokens"]),
    ):
        batch.usage[name] = batch.usage.get(name, 0) + value
    return line


def _file(state: EmulatorState, lines: list[dict[str, Any]]) -> str:
    file_id = state.next_id("file-emu")
    state.files[file_id] = ("batch_output", "".join(dumps(line) + "\n" for line in lines).encode())
    return file_id


def _counts(batch: Batch) -> dict[str, int]:
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if batch.state != "ended":
        counts["processing"] = len(batch.requests)
        return counts
    for line in batch.results:
        counts[line["result"]["type"]] += 1
    return counts


def _anthropic_batch(batch: Batch, base_url: str) -> dict[str, Any]:
    ended = batch.state == "ended"
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": batch.state,
        "request_counts": _counts(batch),
        "created_at": _time(batch.created_at),
        "expires_at": _time(batch.created_at + DAY),
        "ended_at": _time(batch.ended_at) if batch.ended_at is not None else None,
        "cancel_initiated_at": None,
        "archived_at": None,
        "results_url": f"{base_url}{ANTHROPIC_PATH}/{batch.id}/results" if ended else None,
    }


def _missing(api: str, what: str) -> Outcome:
    if api == "anthropic":
        error = {"type": "not_found_error", "message": f"{what} not found"}
        return Outcome(404, {"type": "error", "error": error})
    return openai_api.error_outcome(404, f"No such {what}")


# -- Anthropic ---------------------------------------------------------------------------------------


def anthropic_create(state: EmulatorState, body: dict[str, Any], base_url: str) -> Outcome:
    """``POST /v1/messages/batches``: ``{"requests": [{"custom_id", "params"}]}``."""
    with state.lock:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return anthropic_api.error_outcome(state, 400, "requests: at least one request is required")
        pairs = []
        for item in requests:
            if not isinstance(item, dict) or not isinstance(item.get("params"), dict):
                return anthropic_api.error_outcome(state, 400, "requests: each needs custom_id and params")
            pairs.append((str(item.get("custom_id")), item["params"]))
        batch = _new(state, "anthropic", "msgbatch_emu_", pairs)
        return Outcome(200, _anthropic_batch(batch, base_url))


def anthropic_retrieve(state: EmulatorState, batch_id: str, base_url: str) -> Outcome:
    with state.lock:
        batch = state.batches.get(batch_id)
        if batch is None or batch.api != "anthropic":
            return _missing("anthropic", f"message batch {batch_id}")
        _settle(state, batch)
        return Outcome(200, _anthropic_batch(batch, base_url))


def anthropic_results(state: EmulatorState, batch_id: str) -> Outcome:
    """The JSONL of an ended batch's results."""
    with state.lock:
        batch = state.batches.get(batch_id)
        if batch is None or batch.api != "anthropic" or batch.state != "ended":
            return _missing("anthropic", f"results of message batch {batch_id}")
        data = "".join(dumps(line) + "\n" for line in batch.results).encode()
        return Outcome(200, raw=data, headers={"Content-Type": "application/binary"})


def anthropic_cancel(state: EmulatorState, batch_id: str, base_url: str) -> Outcome:
    with state.lock:
        batch = state.batches.get(batch_id)
        if batch is None or batch.api != "anthropic":
            return _missing("anthropic", f"message batch {batch_id}")
        if batch.state == "in_progress":
            batch.state = "canceling"
        state.cancelled_batches.append(batch_id)
        return Outcome(200, _anthropic_batch(batch, base_url))


# -- OpenAI --------------------------------------------------------------------------------------------


def openai_upload(state: EmulatorState, purpose: str, filename: str, data: bytes) -> Outcome:
    """``POST /v1/files`` (multipart): a batch's input, one JSON request per line."""
    with state.lock:
        if purpose != "batch":
            return openai_api.error_outcome(400, f"purpose '{purpose}' is not served here (batch is)")
        try:
            for raw in data.decode().splitlines():
                if raw.strip():
                    json.loads(raw)
        except ValueError as error:
            return openai_api.error_outcome(400, f"The file is not valid JSONL: {error}")
        file_id = state.next_id("file-emu")
        state.files[file_id] = (purpose, data)
        body = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": openai_api.CREATED_BASE + int(state.clock.now()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        return Outcome(200, body)


def openai_content(state: EmulatorState, file_id: str) -> Outcome:
    with state.lock:
        found = state.files.get(file_id)
        if found is None:
            return _missing("openai", f"file {file_id}")
        return Outcome(200, raw=found[1], headers={"Content-Type": "application/octet-stream"})


def _openai_batch(batch: Batch) -> dict[str, Any]:
    at = openai_api.CREATED_BASE
    status = {"in_progress": "in_progress", "canceling": "cancelling"}.get(batch.state)
    if status is None:
        status = {"succeeded": "completed", "expired": "expired", "canceled": "cancelled"}[batch.outcome]
    done = sum(1 for line in batch.results if line["error"] is None)
    usage = batch.usage
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "input_file_id": batch.input_file_id,
        "status": status,
        "created_at": at + int(batch.created_at),
        "expires_at": at + int(batch.created_at + DAY),
        "completed_at": at + int(batch.ended_at) if batch.ended_at is not None else None,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "request_counts": {
            "total": len(batch.requests),
            "completed": done,
            "failed": len(batch.results) - done,
        },
        "usage": {
            "input_tokens": usage.get("input_tokens", 0),
            "input_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            "output_tokens": usage.get("output_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.get("input_tokens", 0) + usage.get("output_tokens", 0),
        },
        "metadata": None,
    }


def openai_create(state: EmulatorState, body: dict[str, Any]) -> Outcome:
    """``POST /v1/batches``: ``{"input_file_id", "endpoint", "completion_window"}``."""
    with state.lock:
        found = state.files.get(str(body.get("input_file_id")))
        if found is None or found[0] != "batch":
            return openai_api.error_outcome(400, "input_file_id: no such batch file")
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return openai_api.error_outcome(400, "endpoint /v1/chat/completions and completion_window 24h")
        pairs: list[tuple[str, dict[str, Any]]] = []
        for raw in found[1].decode().splitlines():
            if raw.strip():
                line = json.loads(raw)
                if line.get("url") != "/v1/chat/completions" or not isinstance(line.get("body"), dict):
                    return openai_api.error_outcome(400, "each line needs a chat completions url and body")
                pairs.append((str(line.get("custom_id")), line["body"]))
        batch = _new(state, "openai", "batch_emu_", pairs)
        batch.input_file_id = str(body["input_file_id"])
        return Outcome(200, _openai_batch(batch))


def openai_retrieve(state: EmulatorState, batch_id: str) -> Outcome:
    with state.lock:
        batch = state.batches.get(batch_id)
        if batch is None or batch.api != "openai":
            return _missing("openai", f"batch {batch_id}")
        _settle(state, batch)
        return Outcome(200, _openai_batch(batch))


def openai_cancel(state: EmulatorState, batch_id: str) -> Outcome:
    with state.lock:
        batch = state.batches.get(batch_id)
        if batch is None or batch.api != "openai":
            return _missing("openai", f"batch {batch_id}")
        if batch.state == "in_progress":
            batch.state = "canceling"
        state.cancelled_batches.append(batch_id)
        return Outcome(200, _openai_batch(batch))
