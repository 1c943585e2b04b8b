"""Serving: :class:`ProviderEmulator` over aiohttp, on the caller's loop or in a thread.

The HTTP layer only parses JSON and writes what the API modules decided; all state changes
happen inside them under the state lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aiohttp import web

from . import anthropic_api, openai_api
from .records import RecordedRequest
from .state import EmulatorState
from .wire import Outcome, dumps

Handler = Callable[[EmulatorState, str, bytes, dict[str, Any]], Outcome]
START_TIMEOUT = 10.0
SHUTDOWN_TIMEOUT = 2.0


class ProviderEmulator(EmulatorState):
    """An offline Anthropic + OpenAI endpoint with a faithful prompt-cache model.

    ``async with emu.serve() as base_url`` on the running loop, or ``with emu.serve_in_thread()``
    for synchronous callers and subprocess tests. Controls: :meth:`script`, ``responder``,
    :meth:`fail_next`, :meth:`fail_midstream`, :meth:`reset_cache`, ``clock``; log: ``requests``.
    """

    stream_delay: float = 0.0  # seconds between streamed events: slow streams for cancellation tests
    in_flight: int = 0  # model requests being answered now (streams included)
    max_in_flight: int = 0  # the most answered at once since start

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._route(anthropic_api.messages, "anthropic"))
        app.router.add_post("/v1/messages/count_tokens", self._route(anthropic_api.count_tokens, "anthropic"))
        app.router.add_post("/v1/chat/completions", self._route(openai_api.chat_completions, "openai"))
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
                return await _send(request, handler(self, request.path, raw, body), self.stream_delay)
            finally:
                self.in_flight -= 1

        return handle

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

    async def _not_found(self, request: web.Request) -> web.Response:
        body = {
            "type": "error",
            "error": {"type": "not_found_error", "message": f"Not found: {request.path}"},
        }
        return web.json_response(body, status=404, dumps=dumps)

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on the current event loop; yields the base URL (``http://127.0.0.1:PORT``)."""
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = runner.addresses[0][1]
            yield f"http://{host}:{bound}"
        finally:
            await runner.cleanup()

    @contextmanager
    def serve_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Serve from a daemon thread with its own loop; yields the base URL."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        stop = asyncio.Event()
        urls: list[str] = []
        errors: list[BaseException] = []

        async def main() -> None:
            try:
                async with self.serve(host, port) as url:
                    urls.append(url)
                    ready.set()
                    await stop.wait()
            except BaseException as exc:
                errors.append(exc)
                raise
            finally:
                ready.set()

        def run() -> None:
            try:
                loop.run_until_complete(main())
            except BaseException:  # reported to the caller through `errors`
                pass
            finally:
                loop.close()

        thread = threading.Thread(target=run, name="provider-emulator", daemon=True)
        thread.start()
        if not ready.wait(START_TIMEOUT) or not urls:
            raise RuntimeError("the provider emulator did not start") from (errors[0] if errors else None)
        try:
            yield urls[0]
        finally:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
            thread.join(START_TIMEOUT)


async def _send(request: web.Request, out: Outcome, delay: float) -> web.StreamResponse:
    if out.events is None:
        return web.json_response(out.body, status=out.status, headers=out.headers, dumps=dumps)
    response = web.StreamResponse(
        status=out.status,
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            **out.headers,
        },
    )
    try:
        await response.prepare(request)
        for event in out.events:
            await response.write(event)
            if delay:
                await asyncio.sleep(delay)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away mid-stream; nothing left to do
    return response
