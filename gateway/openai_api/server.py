"""The API's HTTP side: ``/v1/chat/completions`` and ``/v1/models`` on the gateway's HTTP server.

Each request is authenticated by its bearer key (``gateway.openai_api.keys``), read strictly
(``gateway.openai_api.wire``) and answered by one turn (``gateway.openai_api.answering``) that runs in a
task of its own while the handler watches the connection: a client that goes away (closed connection,
a write that fails) has its turn cancelled within :data:`WATCH_EVERY` seconds, and a stream that has
nothing to say for :data:`KEEP_ALIVE_EVERY` seconds (a long tool run) gets an SSE comment, so proxies
and clients keep waiting. Everything refused before a stream starts is an HTTP error in OpenAI's format
(401 wrong key, 400 bad request, 404 unknown model, 403 not allowed, 429 over a spend limit, 503 while
shutting down); a failure once the stream has started is an error event in it, as OpenAI sends one.

With ``bots:`` each key names its bot (``api.keys[].bot``): its requests are answered by that bot's
turns (its database, sessions, memory, limits and model), and ``/v1/models`` names the bot as the
model's owner. A conversation found for one bot's key is never looked for in another bot's database.

The conversation id a client may send: the header ``X-Herald-Conversation``, else
``metadata.conversation_id`` in the body, else Open WebUI's ``X-OpenWebUI-Chat-Id`` (sent when Open
WebUI forwards its user info headers). It confines the matching of histories to that conversation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from aiohttp import web

from agent.api import Usage
from agent.db import Storage
from gateway.config import ApiSettings
from gateway.conversation.context import AgentRuntime, TurnServices
from gateway.openai_api.answering import NO_RETRY, ApiRequest, ApiTurns, ClientGone
from gateway.openai_api.conversations import Conversations
from gateway.openai_api.keys import Caller, KeyRing
from gateway.openai_api.wire import (
    DONE,
    KEEP_ALIVE,
    OWNER,
    ApiError,
    ChatRequest,
    Chunks,
    bad_request,
    completion,
    completion_id,
    conversation_id,
    event,
    model_body,
    models_body,
    parse_request,
)

log = logging.getLogger(__name__)

PREFIX = "/v1"
WATCH_EVERY = 0.25  # seconds between looks at a waiting request's connection
KEEP_ALIVE_EVERY = 10.0  # seconds of silence in a stream before an SSE comment
READ_CHUNK = 64 * 1024
BODY_SECONDS = 60.0  # a request body that takes longer to arrive is refused
CONVERSATION_HEADERS = ("X-Herald-Conversation", "X-OpenWebUI-Chat-Id")
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CLIENT_GONE = "the client went away"
SHUTTING_DOWN = "shutting down"
NO_KEY = (
    "You didn't provide an API key: send it in an Authorization header using Bearer auth "
    "(Authorization: Bearer YOUR_KEY)."
)
WRONG_KEY = "Incorrect API key provided: it is not one of this Herald's api.keys."
STOPPING = ApiError(
    503,
    "Herald is shutting down; send the request again in a moment.",
    kind="api_error",
    code="shutting_down",
    headers={"Retry-After": "5"},
)
UNEXPECTED = ApiError(
    500,
    "Something went wrong on Herald's side (the details are in the gateway's log).",
    kind="api_error",
    code="internal_error",
    headers=NO_RETRY,
)


def error_response(error: ApiError) -> web.Response:
    return web.json_response(error.body(), status=error.status, headers=error.headers, dumps=json.dumps)


def _closed(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class StreamOutput:
    """A streaming answer: server-sent events, opened at the first thing to say (so an error before it
    is still an HTTP status)."""

    def __init__(self, request: web.Request, chunks: Chunks) -> None:
        self.request = request
        self.chunks = chunks
        self.response: web.StreamResponse | None = None
        self.gone = False
        self._quiet_since = time.monotonic()
        self._lock = asyncio.Lock()  # the turn's text and the handler's keep-alives write one stream

    async def _write(self, data: bytes) -> bool:
        """Write ``data`` (opening the stream first); False once the client is gone."""
        if self.gone:
            return False
        try:
            if self.response is None:
                response = web.StreamResponse(headers=SSE_HEADERS)
                await response.prepare(self.request)
                self.response = response
                await response.write(self.chunks.start())
            await self.response.write(data)
        except ConnectionError:
            self.gone = True
            return False
        self._quiet_since = time.monotonic()
        return True

    async def text(self, delta: str) -> None:
        async with self._lock:
            await self._write(self.chunks.text(delta))

    async def keep_alive(self) -> None:
        if time.monotonic() - self._quiet_since < KEEP_ALIVE_EVERY:
            return
        async with self._lock:
            await self._write(KEEP_ALIVE)

    async def deliver(self, answer: str, usage: Usage) -> None:
        async with self._lock:
            ends = [
                self.chunks.finish(),
                *([self.chunks.usage(usage)] if self.chunks.include_usage else []),
                DONE,
            ]
            for data in ends:
                if not await self._write(data):
                    raise ClientGone()
            assert self.response is not None
            try:
                await self.response.write_eof()
            except ConnectionError:
                raise ClientGone() from None

    async def fail(self, error: ApiError) -> web.StreamResponse:
        """``error`` as the answer: an HTTP error, or an error event in a stream already open."""
        async with self._lock:
            if self.response is None:
                return error_response(error)
            if await self._write(event(error.body())):
                try:
                    await self.response.write_eof()
                except ConnectionError:
                    self.gone = True
            return self.response


class WholeOutput:
    """An answer that does not stream: one JSON body at the end."""

    def __init__(self, request: web.Request, answer_id: str, model: str, created: int) -> None:
        self.request = request
        self.answer_id = answer_id
        self.model = model
        self.created = created
        self.response: web.StreamResponse | None = None
        self.gone = False

    async def text(self, delta: str) -> None:
        return None

    async def keep_alive(self) -> None:
        return None

    async def deliver(self, answer: str, usage: Usage) -> None:
        body = json.dumps(completion(self.answer_id, self.model, answer, usage, self.created)).encode()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        try:
            if _closed(self.request):
                raise ConnectionResetError(CLIENT_GONE)
            await response.prepare(self.request)
            await response.write(body)
            await response.write_eof()
        except ConnectionError:
            self.gone = True
            raise ClientGone() from None
        self.response = response

    async def fail(self, error: ApiError) -> web.StreamResponse:
        return error_response(error)


Output = StreamOutput | WholeOutput


class ApiServer:
    """The API's application and the turns it runs (for a drain at shutdown). ``turns`` holds each bot's
    (by name; None: the one bot without ``bots:``); a key's caller names its bot."""

    def __init__(
        self,
        turns: Mapping[str | None, ApiTurns],
        keys: KeyRing,
        settings: ApiSettings,
        *,
        created: int,
    ) -> None:
        self.turns = turns
        self.keys = keys
        self.settings = settings
        self.created = created  # the model's "created" time: when this gateway started
        self.accepting = True
        self._running: set[asyncio.Task[None]] = set()

    def application(self) -> web.Application:
        app = web.Application(middlewares=[_openai_errors])
        app.router.add_get("/models", self._models)
        app.router.add_get("/models/{model}", self._model)
        app.router.add_post("/chat/completions", self._chat)
        return app

    async def drain(self, seconds: float) -> bool:
        """Take no new request; let the running turns finish within ``seconds``, then stop them (each is
        withdrawn from its conversation, and its client told). True when all finished."""
        self.accepting = False
        running = set(self._running)
        if not running:
            return True
        _, pending = await asyncio.wait(running, timeout=seconds)
        for task in pending:
            task.cancel(SHUTTING_DOWN)
        if pending:
            await asyncio.wait(pending)
        return not pending

    def _caller(self, request: web.Request) -> Caller:
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, NO_KEY, code="invalid_api_key")
        caller = self.keys.find(key.strip())
        if caller is None:
            log.info("api: a request from %s with a wrong key was refused", request.remote)
            raise ApiError(401, WRONG_KEY, code="invalid_api_key")
        return caller

    async def _body(self, request: web.Request) -> bytes:
        limit = int(self.settings.max_request_mb * 1_000_000)
        too_big = bad_request(
            f"The request body is larger than {self.settings.max_request_mb:g} MB (api.max_request_mb).",
            code="request_too_large",
        )
        if request.content_length is not None and request.content_length > limit:
            raise too_big
        body = bytearray()
        try:
            async with asyncio.timeout(BODY_SECONDS):
                while chunk := await request.content.read(READ_CHUNK):
                    body += chunk
                    if len(body) > limit:
                        raise too_big
        except TimeoutError:
            raise ApiError(408, f"The request body did not arrive within {BODY_SECONDS:g} seconds.") from None
        return bytes(body)

    def _conversation(self, request: web.Request, chat: ChatRequest) -> str | None:
        herald, open_webui = (request.headers.get(name) for name in CONVERSATION_HEADERS)
        if herald is not None:
            return conversation_id(herald, CONVERSATION_HEADERS[0])
        if chat.conversation is not None:
            return chat.conversation
        return conversation_id(open_webui, CONVERSATION_HEADERS[1]) if open_webui is not None else None

    async def _models(self, request: web.Request) -> web.Response:
        try:
            caller = self._caller(request)
        except ApiError as error:
            return error_response(error)
        return web.json_response(models_body(self.settings.model_name, self.created, _owner(caller)))

    async def _model(self, request: web.Request) -> web.Response:
        try:
            caller = self._caller(request)
            name = request.match_info["model"]
            if name != self.settings.model_name:
                raise ApiError(
                    404,
                    f"The model '{name}' does not exist: this server offers '{self.settings.model_name}'.",
                    code="model_not_found",
                )
        except ApiError as error:
            return error_response(error)
        return web.json_response(model_body(name, self.created, _owner(caller)))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if not self.accepting:
            return error_response(STOPPING)
        try:
            caller = self._caller(request)
            chat = parse_request(await self._body(request), self.settings.model_name)
            conversation = self._conversation(request, chat)
        except ApiError as error:
            return error_response(error)
        answer_id, created = completion_id(), int(time.time())
        output: Output
        if chat.stream:
            output = StreamOutput(request, Chunks(answer_id, chat.model, created, chat.include_usage))
        else:
            output = WholeOutput(request, answer_id, chat.model, created)
        answering = self.turns[caller.bot].answer(
            ApiRequest(caller, chat.transcript, conversation, output, answer_id, streaming=chat.stream)
        )
        task = asyncio.create_task(answering, name=f"api {caller.label} {answer_id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        try:
            await self._watch(request, task, output, caller)
        except asyncio.CancelledError:  # the server itself stops: the turn stops with it
            if not task.done():
                task.cancel(SHUTTING_DOWN)
                await asyncio.wait({task})
            raise
        return await self._outcome(task, output)

    async def _watch(
        self, request: web.Request, task: asyncio.Task[None], output: Output, caller: Caller
    ) -> None:
        """Wait for ``task``, cancelling it once the client is gone, keeping a quiet stream alive."""
        while True:
            done, _ = await asyncio.wait({task}, timeout=WATCH_EVERY)
            if done:
                return
            if output.gone or _closed(request):
                log.info("api %s: the client went away; its turn is stopped", caller.label)
                task.cancel(CLIENT_GONE)
                await asyncio.wait({task})
                return
            await output.keep_alive()

    async def _outcome(self, task: asyncio.Task[None], output: Output) -> web.StreamResponse:
        """What the handler answers once the turn task ended."""
        if task.cancelled():  # the client went away, or the gateway stops
            if output.gone or _closed(output.request):
                return output.response or web.Response(status=499, text=CLIENT_GONE)
            return await output.fail(STOPPING)
        error = task.exception()
        if error is None:
            assert output.response is not None
            return output.response
        if isinstance(error, ClientGone):
            return output.response or web.Response(status=499, text=CLIENT_GONE)
        if not isinstance(error, ApiError):
            log.error("api: answering failed unexpectedly", exc_info=error)
            error = UNEXPECTED
        return await output.fail(error)


def _owner(caller: Caller) -> str:
    """Who owns the model a key may use: its bot (``bots:``), else Herald."""
    return caller.bot or OWNER


@web.middleware
async def _openai_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Unknown paths and methods answered in OpenAI's error format too."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        error = ApiError(
            404,
            f"Unknown path {request.path}: Herald serves {PREFIX}/chat/completions and {PREFIX}/models.",
            code="unknown_url",
        )
    except web.HTTPMethodNotAllowed as refused:
        allowed = {"Allow": ", ".join(sorted(refused.allowed_methods))}
        error = ApiError(405, f"{request.method} is not allowed on {request.path}.", headers=allowed)
    return error_response(error)


class ApiRuntime(AgentRuntime, Protocol):
    """The agent's runtime as the API uses it: a turn's, and the database its conversations are kept in."""

    @property
    def storage(self) -> Storage: ...


class ApiServices(TurnServices, Protocol):
    """What the API reads of a bot's services (``gateway.wiring`` hands them in): a turn's, and since when
    the bot runs (its models' ``created``)."""

    @property
    def runtime(self) -> ApiRuntime: ...
    @property
    def started_at(self) -> float: ...


def build_api(
    settings: ApiSettings, keys: KeyRing, bots: Mapping[str | None, ApiServices]
) -> ApiServer | None:
    """The API of this gateway process, or None when no key is configured (then it is not served):
    each bot of ``bots`` (by name) answers on turns of its own, in its own database."""
    if not len(keys):
        return None
    turns = {
        name: ApiTurns(services, Conversations(services.runtime.storage))
        for name, services in bots.items()
    }
    started = min(services.started_at for services in bots.values())
    return ApiServer(turns, keys, settings, created=int(started))
