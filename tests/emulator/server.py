"""Serving: :class:`ProviderEmulator` over aiohttp, on the caller's loop or in a thread.

The HTTP layer only parses JSON and writes what the API modules decided; all state changes
happen inside them under the state lock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from functools import partial
from http import HTTPStatus
from typing import Any

from aiohttp import WSMsgType, web

from tests.threaded import serve_in_thread

from . import anthropic_api, audio, batches, openai_api, speech
from .records import RecordedRequest
from .state import EmulatorState
from .wire import Outcome, dumps

Handler = Callable[[EmulatorState, str, bytes, dict[str, Any]], Outcome]
SHUTDOWN_TIMEOUT = 2.0


class ProviderEmulator(EmulatorState):
    """An offline Anthropic + OpenAI endpoint with a faithful prompt-cache model.

    ``async with emu.serve() as base_url`` on the running loop, or ``with emu.serve_in_thread()``
    for synchronous callers and subprocess tests. Controls: :meth:`script`, ``responder``, faults
    (:meth:`fail_next`, :meth:`fail_midstream`, :meth:`drop_midstream`, :meth:`truncate_next`,
    :meth:`stall_next`), :meth:`hold_streams` / :meth:`release_streams`, :meth:`reset_cache`, ``clock``,
    ``before_answer``; batches (``batch_delay``, :meth:`end_batches`, :meth:`expire_batches`); log:
    ``requests``, ``batches``, ``cancelled_batches``.
    """

    stream_delay: float = 0.0  # seconds between streamed events: slow streams for cancellation tests
    # Awaited with each model request's body before it is answered (served on the test's loop): a test
    # changes the world between two model calls of one turn (revokes someone mid-turn), with no timing.
    before_answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    in_flight: int = 0  # model requests being answered now (streams included)
    max_in_flight: int = 0  # the most answered at once since start
    model_list: bool = True  # GET /v1/models answers; False: a compatible server that has none (404)
    batch_api: bool = True  # the batch endpoints answer; False: a compatible server that has none (404)

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._route(anthropic_api.messages, "anthropic"))
        app.router.add_post("/v1/messages/count_tokens", self._route(anthropic_api.count_tokens, "anthropic"))
        app.router.add_post("/v1/chat/completions", self._route(openai_api.chat_completions, "openai"))
        app.router.add_post("/v1/messages/batches", self._batch_create)
        app.router.add_get("/v1/messages/batches/{id}", self._batch_get)
        app.router.add_get("/v1/messages/batches/{id}/results", self._batch_results)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self._batch_cancel)
        app.router.add_post("/v1/files", self._file_upload)
        app.router.add_get("/v1/files/{id}/content", self._file_content)
        app.router.add_post("/v1/batches", self._batch_create)
        app.router.add_get("/v1/batches/{id}", self._batch_get)
        app.router.add_post("/v1/batches/{id}/cancel", self._batch_cancel)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speak)
        app.router.add_get(speech.EDGE_PATH, self._edge)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    def _route(self, handler: Handler, api: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                raw = await request.read()
                try:
                    body = json.loads(raw)
                    if not isinstance(body, dict):
                        raise ValueError("the body must be a JSON object")
                except ValueError as exc:
                    return await _send(request, self._bad_json(api, request.path, raw, str(exc)), 0.0)
                if self.before_answer is not None:
                    await self.before_answer(body)
                out = handler(self, request.path, raw, body)
                hold = self.take_hold() if out.events else None
                pause = None if hold is None else partial(self._held, hold)
                return await _send(request, out, self.stream_delay, pause)
            finally:
                self.in_flight -= 1

        return handle

    # -- the batch APIs (tests/emulator/batches.py) ------------------------------------------------------

    @staticmethod
    def _base(request: web.Request) -> str:
        return f"{request.scheme}://{request.host}"

    async def _batch_create(self, request: web.Request) -> web.StreamResponse:
        if not self.batch_api:
            return await self._not_found(request)
        anthropic = request.path.startswith("/v1/messages/")
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            api = "anthropic" if anthropic else "openai"
            return await _send(request, self._bad_json(api, request.path, b"", str(exc)), 0.0)
        if anthropic:
            return await _send(request, batches.anthropic_create(self, body, self._base(request)), 0.0)
        return await _send(request, batches.openai_create(self, body), 0.0)

    async def _batch_get(self, request: web.Request) -> web.StreamResponse:
        batch_id = request.match_info["id"]
        if request.path.startswith("/v1/messages/"):
            return await _send(request, batches.anthropic_retrieve(self, batch_id, self._base(request)), 0.0)
        return await _send(request, batches.openai_retrieve(self, batch_id), 0.0)

    async def _batch_results(self, request: web.Request) -> web.StreamResponse:
        return await _send(request, batches.anthropic_results(self, request.match_info["id"]), 0.0)

    async def _batch_cancel(self, request: web.Request) -> web.StreamResponse:
        batch_id = request.match_info["id"]
        if request.path.startswith("/v1/messages/"):
            return await _send(request, batches.anthropic_cancel(self, batch_id, self._base(request)), 0.0)
        return await _send(request, batches.openai_cancel(self, batch_id), 0.0)

    async def _file_upload(self, request: web.Request) -> web.StreamResponse:
        if not self.batch_api:
            return await self._not_found(request)
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return await _send(request, openai_api.error_outcome(400, "file is required"), 0.0)
        purpose = str(form.get("purpose") or "")
        outcome = batches.openai_upload(self, purpose, upload.filename, upload.file.read())
        return await _send(request, outcome, 0.0)

    async def _file_content(self, request: web.Request) -> web.StreamResponse:
        return await _send(request, batches.openai_content(self, request.match_info["id"]), 0.0)

    async def _held(self, since: int) -> None:
        """Where a held answer waits (cancelled when its client hangs up)."""
        with self.lock:
            self.holding += 1
        try:
            while not self.released(since):  # noqa: ASYNC110 - released from any thread
                await asyncio.sleep(0.01)
        finally:
            with self.lock:
                self.holding -= 1

    def _bad_json(self, api: str, path: str, raw: bytes, message: str) -> Outcome:
        with self.lock:
            out = (
                anthropic_api.error_outcome(self, 400, f"Invalid JSON body: {message}")
                if api == "anthropic"
                else openai_api.error_outcome(400, f"Invalid JSON body: {message}")
            )
            rec = RecordedRequest(api, path, "", False, raw, {}, status=400, error=f"invalid_json: {message}")
            self.record(rec)
            return out

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return await _send(request, openai_api.error_outcome(400, "file is required"), 0.0)
        language = form.get("language")
        outcome = audio.transcribe(
            self,
            str(form.get("model") or ""),
            upload.filename,
            upload.file.read(),
            language if isinstance(language, str) else None,
        )
        return await _send(request, outcome, 0.0)

    async def _speak(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            return await _send(request, openai_api.error_outcome(400, f"Invalid JSON body: {exc}"), 0.0)
        admitted = speech.admit(self, body)
        if isinstance(admitted, speech.Speech):
            admitted = await asyncio.to_thread(speech.audio_of, admitted)
        return await _send(request, admitted, 0.0)

    async def _edge(self, request: web.Request) -> web.WebSocketResponse:
        """Edge's read-aloud service: a ``speech.config`` message, then an ``ssml`` one, answered with
        the audio (see ``speech.edge_messages``)."""
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        async for message in socket:
            if message.type is WSMsgType.TEXT and "Path:ssml" in message.data:
                record = speech.edge_request(self, message.data)
                for frame in await asyncio.to_thread(speech.edge_messages, record):
                    await (socket.send_str(frame) if isinstance(frame, str) else socket.send_bytes(frame))
                break
        await socket.close()
        return socket

    async def _models(self, request: web.Request) -> web.Response:
        """The model list, in the shape of the API that asks (the Anthropic SDK sends anthropic-version)."""
        if not self.model_list:
            return await self._not_found(request)
        anthropic = "anthropic-version" in request.headers
        body = anthropic_api.model_list() if anthropic else openai_api.model_list()
        return web.json_response(body, dumps=dumps)

    async def _not_found(self, request: web.Request) -> web.Response:
        body = {
            "type": "error",
            "error": {"type": "not_found_error", "message": f"Not found: {request.path}"},
        }
        return web.json_response(body, status=404, dumps=dumps)

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on the current event loop; yields the base URL (``http://127.0.0.1:PORT``)."""
        # handler_cancellation: a client that hangs up ends its handler at once, so a stalled or
        # slowed-down answer never outlives its client nor holds up shutdown.
        runner = web.AppRunner(
            self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT, handler_cancellation=True
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = runner.addresses[0][1]
            yield f"http://{host}:{bound}"
        finally:
            await runner.cleanup()

    def serve_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> AbstractContextManager[str]:
        """Serve from a daemon thread with its own loop; yields the base URL."""
        return serve_in_thread(lambda: self.serve(host, port), "provider emulator")


async def _send(
    request: web.Request, out: Outcome, delay: float, pause: Callable[[], Awaitable[None]] | None = None
) -> web.StreamResponse:
    """Write ``out``; ``delay`` is the pause between streamed events; ``pause`` is awaited half-way."""
    if out.hold:
        await asyncio.sleep(out.hold)  # cancelled when the client hangs up (handler_cancellation)
    if out.raw is not None:
        return web.Response(status=out.status, body=out.raw, headers=out.headers)
    if out.events is None:
        return web.json_response(out.body, status=out.status, headers=out.headers, dumps=dumps)
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", **out.headers}
    if not out.chunked:
        return await _send_close_delimited(request, out, headers, delay, pause)
    response = web.StreamResponse(status=out.status, headers=headers)
    halfway = len(out.events) // 2
    try:
        await response.prepare(request)
        for index, event in enumerate(out.events):
            await response.write(event)
            if delay:
                await asyncio.sleep(delay)
            if pause is not None and index == halfway:
                await pause()
        if out.drop:
            _hang_up(request)
        else:
            await response.write_eof()
    except ConnectionError:
        pass  # the client went away mid-stream; nothing left to do
    return response


async def _send_close_delimited(
    request: web.Request,
    out: Outcome,
    headers: dict[str, str],
    delay: float,
    pause: Callable[[], Awaitable[None]] | None,
) -> web.StreamResponse:
    """Stream ``out.events`` with no chunked framing, then close: the end of the connection ends the body.

    aiohttp always frames a streamed HTTP/1.1 body, so the head and events go to the transport
    directly, as an HTTP/1.0-style hop (an old proxy, a hand-rolled server) would send them.
    """
    transport = request.transport
    if transport is None:
        return web.StreamResponse(status=out.status)
    status = f"HTTP/1.1 {out.status} {HTTPStatus(out.status).phrase}"
    lines = [status, *(f"{k}: {v}" for k, v in headers.items()), "Connection: close"]
    transport.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    events = out.events or []
    for index, event in enumerate(events):
        transport.write(event)
        if delay:
            await asyncio.sleep(delay)
        if pause is not None and index == len(events) // 2:
            await pause()
    _hang_up(request)
    return web.StreamResponse(status=out.status)  # never sent: the connection is closed


def _hang_up(request: web.Request) -> None:
    """Close the TCP connection after flushing what was written, leaving the chunked body unfinished."""
    transport = request.transport
    if transport is not None:
        transport.close()
