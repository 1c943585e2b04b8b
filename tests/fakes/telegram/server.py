"""Serving: :class:`FakeTelegram` over aiohttp, on the caller's loop or in a thread.

The HTTP layer parses parameters, records the call and writes what the method handlers decided;
state changes happen inside the handlers under the state lock. Two things wait: ``getUpdates`` long
polls (woken at once by a pushed update, ended at once on shutdown) and webhook deliveries (POSTs
to the bot's registered URL, one at a time, in update order).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from resilience.cancelling import wait_event
from tests.fakes.waiting import WAIT_TIMEOUT, Waiter
from tests.threaded import serve_in_thread

from .methods import METHODS, canonical, get_updates_conflict, get_updates_params
from .records import RecordedCall, WebhookDelivery
from .state import TelegramState
from .wire import ApiError, Reply, Upload, bad_request, decode_params, dumps

T = TypeVar("T")
SHUTDOWN_TIMEOUT = 2.0
CONFLICT = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"


@dataclass(eq=False)
class _Poll:
    event: asyncio.Event
    terminated: bool = False


class FakeTelegram(TelegramState):
    """An offline Telegram Bot API server for one bot, driven by the real python-telegram-bot.

    ``async with fake.serve() as base_url`` (``http://127.0.0.1:PORT/bot``, for
    ``ApplicationBuilder().base_url(...)``; ``fake.base_file_url`` for ``.base_file_url(...)``),
    or ``with fake.serve_in_thread() as base_url`` for sync callers and subprocess tests.
    Inject: :meth:`private_message`, :meth:`group_message`, :meth:`push_update`,
    :meth:`redeliver`. Faults: :meth:`fail_next`, :meth:`reject_formatting_next`,
    :meth:`fail_network_next`, :meth:`slow_next`, :meth:`forbid_chat`. Observe: ``calls``, :meth:`messages`,
    :meth:`typing_actions`, :meth:`commands`, :meth:`wait_for`, :meth:`wait_idle`, ``poll_overlaps``,
    ``open_polls``.
    """

    webhook_timeout: float = 10.0  # seconds the fake waits for the bot's webhook to answer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiter = Waiter(self.lock, self.describe)
        self.base_url = ""
        self.base_file_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._polls: set[_Poll] = set()
        self._closing = False
        self._session: aiohttp.ClientSession | None = None
        self._webhook_lock: asyncio.Lock | None = None
        self._deliverer: asyncio.Task[None] | None = None
        self._delivering = 0
        # When a getUpdates arrived while another was still waiting: two pollers of one bot (Telegram
        # ends the earlier call with 409 "terminated by other getUpdates request").
        self.poll_overlaps: list[float] = []

    @property
    def open_polls(self) -> int:
        """How many ``getUpdates`` calls are held open now, waiting for updates."""
        return len(self._polls)

    # --- serving -------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on the current event loop; yields ``base_url`` (``http://HOST:PORT/bot``)."""
        if self._loop is not None:
            raise RuntimeError("this FakeTelegram is already serving")
        # handler_cancellation: a long poll whose client hung up is abandoned, as Telegram does.
        runner = web.AppRunner(
            self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT, handler_cancellation=True
        )
        await runner.setup()
        self._closing = False
        self._loop = asyncio.get_running_loop()
        self._session = aiohttp.ClientSession()
        self._webhook_lock = asyncio.Lock()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            root = f"http://{host}:{runner.addresses[0][1]}"
            self.base_url, self.base_file_url = f"{root}/bot", f"{root}/file/bot"
            self._on_change()  # a webhook set before serving gets what is pending
            yield self.base_url
        finally:
            self._closing = True
            self._on_change()  # long polls answer [] now
            if self._deliverer is not None:
                self._deliverer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._deliverer
            await runner.cleanup()
            await self._session.close()
            self._loop, self._session, self._deliverer = None, None, None

    def serve_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> AbstractContextManager[str]:
        """Serve from a daemon thread with its own loop; yields ``base_url``."""
        return serve_in_thread(lambda: self.serve(host, port), "fake Telegram server")

    def _changed(self) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._on_change)

    def _on_change(self) -> None:
        """On the server loop: wake long polls; start webhook delivery when there is work."""
        for poll in self._polls:
            poll.event.set()
        with self.lock:
            work = bool(
                self.webhook_url and self.webhook_autodeliver and not self.webhook_paused and self.pending
            )
        idle = self._deliverer is None or self._deliverer.done()
        if work and idle and not self._closing and self._loop is not None:
            self._deliverer = self._loop.create_task(self._drain_webhook())

    # --- HTTP ----------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["method"]
        method = canonical(name) or name
        counted = method != "getUpdates"
        if counted:
            with self.lock:
                self.in_flight += 1
        try:
            return await self._answer(request, method)
        finally:
            if counted:
                with self.lock:
                    self.in_flight -= 1
            self._changed()

    async def _answer(self, request: web.Request, method: str) -> web.StreamResponse:
        parse_error: ApiError | None = None
        params: dict[str, Any] = {}
        uploads: dict[str, Upload] = {}
        try:
            params, uploads = await _read_params(request)
        except ValueError as exc:
            parse_error = bad_request(f"can't parse request: {exc}")
        call = RecordedCall(
            method, params, time.monotonic(), files={k: u.content for k, u in uploads.items()}
        )
        with self.lock:
            self.record_call(call)
            if self.take_network_fault(method):
                call.status, call.description = 0, "connection dropped by fail_network_next"
                if request.transport is not None:
                    request.transport.abort()
                return web.Response(status=500)  # never reaches the client
            status, body = self._precheck(request, method, parse_error)
            delay = self.take_delay(method)
        if delay:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:  # aiohttp cancels a handler whose client went away
                closed = True
            else:
                closed = request.transport is None or request.transport.is_closing()
            if closed:
                with self.lock:
                    call.status, call.description = 499, "client closed the connection"
                return web.Response(status=499)
        with self.lock:
            if status is None and method != "getUpdates":
                status, body = self._dispatch(method, params, uploads)
        if status is None:
            try:
                status, body = await self._get_updates(params)
            except asyncio.CancelledError:
                with self.lock:
                    call.status, call.description = 499, "client closed the connection"
                raise
        with self.lock:
            call.status = status
            call.description = None if body.get("ok") else str(body.get("description"))
        return web.Response(text=dumps(body), status=status, content_type="application/json")

    def _precheck(
        self, request: web.Request, method: str, parse_error: ApiError | None
    ) -> tuple[int | None, dict[str, Any]]:
        """Token, parse errors, unknown methods and scripted faults (lock held)."""
        if request.match_info["token"] != self.token:
            return 401, ApiError(401, "Unauthorized").body()
        if parse_error is not None:
            return parse_error.status, parse_error.body()
        if method not in METHODS and method != "getUpdates":
            return 404, ApiError(404, "Not Found: method not found").body()
        fault = self.take_fault(method)
        if fault is not None:
            return fault.status, self.fault_body(fault)
        return None, {}

    def _dispatch(
        self, method: str, params: dict[str, Any], uploads: dict[str, Upload]
    ) -> tuple[int, dict[str, Any]]:
        try:
            result = METHODS[method](self, params, uploads)
        except ApiError as exc:
            return exc.status, exc.body()
        reply = result if isinstance(result, Reply) else Reply(result)
        return 200, reply.body()

    async def _get_updates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Confirm by offset, answer at once if anything is pending, else wait up to ``timeout``."""
        with self.lock:
            try:
                offset, limit, timeout, allowed = get_updates_params(params)
            except ApiError as exc:
                return exc.status, exc.body()
            conflict = get_updates_conflict(self)
            if conflict is not None:
                return conflict.status, conflict.body()
            if self._polls:  # a second poller ends the first, as on Telegram
                self.poll_overlaps.append(time.monotonic())
            for other in self._polls:
                other.terminated = True
                other.event.set()
            if allowed is not None:
                self.allowed_updates = allowed
            self.confirm(offset)
            updates = self.select_updates(limit, self.allowed_updates)
            if updates or timeout <= 0 or self._closing:
                return 200, {"ok": True, "result": updates}
            poll = _Poll(asyncio.Event())
            self._polls.add(poll)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while not poll.terminated and not self._closing:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                # Not asyncio.wait_for: on 3.11 it swallows the cancellation aiohttp sends when the client
                # hangs up if an update wakes the poll at that moment, and the poll was held on, seen as
                # the next poller's overlap (resilience.cancelling).
                await wait_event(poll.event, remaining)
                poll.event.clear()
                with self.lock:
                    updates = [] if poll.terminated else self.select_updates(limit, self.allowed_updates)
                if updates:
                    return 200, {"ok": True, "result": updates}
        finally:
            self._polls.discard(poll)
        if poll.terminated:
            return 409, ApiError(409, CONFLICT).body()
        return 200, {"ok": True, "result": []}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        with self.lock:
            path = request.match_info["path"]
            stored = next((f for f in self.files.values() if f.file_path == path), None)
            if request.match_info["token"] != self.token or stored is None:
                return web.Response(text=dumps(ApiError(404, "Not Found").body()), status=404)
            return web.Response(body=stored.content, content_type="application/octet-stream")

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            text=dumps(ApiError(404, "Not Found").body()), status=404, content_type="application/json"
        )

    # --- webhook -------------------------------------------------------------------------------

    async def post_webhook(self, update: dict[str, Any]) -> int:
        """Deliver ``update`` to the webhook now; returns the receiver's HTTP status (0: no answer).

        An update not queued yet is queued first. An update the webhook already accepted (say, by
        background delivery after an inject helper) is not POSTed twice: its status is returned.
        A non-2xx answer keeps the update pending and pauses background delivery until
        :meth:`retry_webhook` (or a successful :meth:`post_webhook`).
        """
        with self.lock:
            if not self.webhook_url:
                raise RuntimeError("no webhook is set: call setWebhook first")
            known = update.get("update_id") in self.history
        if not known:
            update = self.push_update(update)
        return await self._on_loop(self._deliver(update, explicit=True))

    async def retry_webhook(self) -> list[int]:
        """POST the pending updates in order until one fails; returns the statuses."""
        return await self._on_loop(self._retry_webhook())

    async def _retry_webhook(self) -> list[int]:
        statuses: list[int] = []
        with self.lock:
            self.webhook_paused = False
            queue = copy.deepcopy(self.pending)
        for update in queue:
            status = await self._deliver(update, explicit=True)
            statuses.append(status)
            if not 200 <= status < 300:
                break
        return statuses

    async def _drain_webhook(self) -> None:
        while True:
            with self.lock:
                if self._closing or not self.webhook_url or self.webhook_paused or not self.pending:
                    return
                update = copy.deepcopy(self.pending[0])
            status = await self._deliver(update, explicit=False)
            if not 200 <= status < 300:
                return

    async def _deliver(self, update: dict[str, Any], *, explicit: bool) -> int:
        assert self._webhook_lock is not None and self._session is not None
        async with self._webhook_lock:
            update_id = int(update["update_id"])
            with self.lock:
                pending = any(u["update_id"] == update_id for u in self.pending)
                accepted = [d for d in self._deliveries if d.update_id == update_id and 200 <= d.status < 300]
                if not pending and (accepted or not explicit):
                    return accepted[-1].status if accepted else 200
                url, secret = self.webhook_url, self.webhook_secret
                self._delivering += 1
            headers = {"Content-Type": "application/json"}
            if secret:
                headers["X-Telegram-Bot-Api-Secret-Token"] = secret
            status, error = 0, ""
            try:
                timeout = aiohttp.ClientTimeout(total=self.webhook_timeout)
                async with self._session.post(
                    url, data=dumps(update).encode(), headers=headers, timeout=timeout
                ) as resp:
                    await resp.read()
                    status, error = (
                        resp.status,
                        f"Wrong response from the webhook: {resp.status} {resp.reason}",
                    )
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
            finally:
                with self.lock:
                    self._delivering -= 1
            with self.lock:
                ok = 200 <= status < 300
                self.record_delivery(
                    WebhookDelivery(update_id, url, status, None if ok else error, time.monotonic())
                )
                if ok:
                    self.pending = [u for u in self.pending if u["update_id"] != update_id]
                    self.webhook_paused = False
                else:
                    self.webhook_last_error = (int(time.time()), error)
                    self.webhook_paused = True
        if ok:
            self._changed()
        return status

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server loop, from that loop or any other."""
        loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError("the fake Telegram server is not serving")
        if asyncio.get_running_loop() is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    # --- waiting -------------------------------------------------------------------------------

    async def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = WAIT_TIMEOUT,  # noqa: ASYNC109 - a bounded wait is the point of this helper
        *,
        what: str | None = None,
    ) -> T:
        """Poll ``predicate`` (under the lock) until it returns something truthy; return that.

        A predicate raising LookupError/AssertionError counts as "not yet". On timeout raises
        :class:`WaitTimeout` (an AssertionError and a TimeoutError) describing recent activity.
        """
        return await self._waiter.wait_for(predicate, timeout, what)

    def wait_for_sync(
        self, predicate: Callable[[], T], timeout: float = WAIT_TIMEOUT, *, what: str | None = None
    ) -> T:
        """:meth:`wait_for` for synchronous callers (``serve_in_thread``)."""
        return self._waiter.wait_for_sync(predicate, timeout, what)

    async def wait_idle(self, timeout: float = WAIT_TIMEOUT) -> None:  # noqa: ASYNC109
        """Wait until every update is confirmed and no request or webhook POST is in flight."""
        await self.wait_for(
            lambda: not self.pending and self.in_flight == 0 and self._delivering == 0,
            timeout,
            what="no pending updates and no request in flight",
        )


async def _read_params(request: web.Request) -> tuple[dict[str, Any], dict[str, Upload]]:
    """Query string, then a JSON, form-encoded or multipart body; JSON values decoded."""
    raw: dict[str, Any] = dict(request.query)
    uploads: dict[str, Upload] = {}
    if request.content_type == "application/json":
        body = await request.read()
        if body.strip():
            decoded = json.loads(body)
            if not isinstance(decoded, dict):
                raise ValueError("the JSON body must be an object")
            raw.update(decoded)
    elif request.can_read_body:
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                uploads[key] = Upload(value.filename, value.content_type, value.file.read())
            else:
                raw[key] = value
    return decode_params(raw), uploads
