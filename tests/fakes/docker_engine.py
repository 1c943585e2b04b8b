"""A small fake Docker Engine API on a unix socket, for the ``docker`` SDK (``tools.sandbox: docker``).

It answers the endpoints the SDK calls to run one command: ping and version, inspect an image, create,
start, inspect, logs (followed, multiplexed frames per stream), wait, stop, kill and remove a container.
A "container" is the command run on this machine by ``/bin/sh -c`` in its working dir with its
environment: nothing is isolated (no real engine runs here), but the SDK's whole path is exercised, and
every create body is kept so tests check what the sandbox was asked to be (network, limits, mounts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import struct
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

API_VERSION = "1.45"
STREAMS = {"stdout": 1, "stderr": 2}


@dataclass
class FakeContainer:
    id: str
    body: dict[str, Any]  # what containers/create was sent
    process: asyncio.subprocess.Process | None = None
    output: dict[str, bytearray] = field(
        default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()}
    )
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None
    stopped: bool = False
    removed: bool = False


class FakeDockerEngine:
    def __init__(self, images: tuple[str, ...] = ("python:3.12-slim",)) -> None:
        self.images = set(images)
        self.containers: dict[str, FakeContainer] = {}
        self.calls: list[str] = []  # "METHOD /path" of every request (the version prefix removed)
        self._running: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def serve(self, socket_path: Path) -> AsyncIterator[str]:
        """Serve on ``socket_path``; yields the URL the SDK takes (``unix://...``)."""
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/_ping", self._ping)
        app.router.add_get("/version", self._version)
        app.router.add_get(r"/v{v}/_ping", self._ping)
        app.router.add_get(r"/v{v}/version", self._version)
        app.router.add_get(r"/v{v}/images/{name:.+}/json", self._image)
        app.router.add_post(r"/v{v}/containers/create", self._create)
        app.router.add_post(r"/v{v}/containers/{id}/start", self._start)
        app.router.add_get(r"/v{v}/containers/{id}/json", self._inspect)
        app.router.add_get(r"/v{v}/containers/{id}/logs", self._logs)
        app.router.add_post(r"/v{v}/containers/{id}/wait", self._wait)
        app.router.add_post(r"/v{v}/containers/{id}/stop", self._stop)
        app.router.add_post(r"/v{v}/containers/{id}/kill", self._kill)
        app.router.add_delete(r"/v{v}/containers/{id}", self._remove)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.UnixSite(runner, str(socket_path))
        await site.start()
        try:
            yield f"unix://{socket_path}"
        finally:
            for container in self.containers.values():
                self._signal(container, signal.SIGKILL)
            await runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if path.startswith("/v") and "/" in path[1:]:
            path = path[path.index("/", 1) :]
        self.calls.append(f"{request.method} {path}")
        response: web.StreamResponse = await handler(request)
        return response

    def _container(self, request: web.Request) -> FakeContainer:
        container = self.containers.get(request.match_info["id"])
        if container is None or container.removed:
            raise web.HTTPNotFound(text=json.dumps({"message": "No such container"}))
        return container

    async def _ping(self, request: web.Request) -> web.Response:
        return web.Response(text="OK", headers={"Api-Version": API_VERSION})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"ApiVersion": API_VERSION, "Version": "fake", "MinAPIVersion": "1.24"})

    async def _image(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.images:
            return web.json_response({"message": f"No such image: {name}"}, status=404)
        return web.json_response({"Id": "sha256:" + "0" * 64, "RepoTags": [name]})

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        container = FakeContainer(uuid.uuid4().hex + uuid.uuid4().hex, body)
        self.containers[container.id] = container
        return web.json_response({"Id": container.id, "Warnings": []}, status=201)

    async def _start(self, request: web.Request) -> web.Response:
        container = self._container(request)
        body = container.body
        env = dict(item.split("=", 1) for item in body.get("Env") or [])
        env.setdefault("PATH", os.defpath + ":/usr/local/bin")
        container.process = await asyncio.create_subprocess_exec(
            *body["Cmd"],
            cwd=body.get("WorkingDir") or "/",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._running.add(asyncio.create_task(self._run(container)))
        return web.Response(status=204)

    async def _run(self, container: FakeContainer) -> None:
        process = container.process
        assert process is not None and process.stdout is not None and process.stderr is not None

        async def pump(reader: asyncio.StreamReader, into: bytearray) -> None:
            while chunk := await reader.read(65536):
                into.extend(chunk)

        await asyncio.gather(
            pump(process.stdout, container.output["stdout"]), pump(process.stderr, container.output["stderr"])
        )
        container.exit_code = await process.wait()
        container.exited.set()

    async def _inspect(self, request: web.Request) -> web.Response:
        container = self._container(request)
        process = container.process
        running = process is not None and not container.exited.is_set()
        state = {
            "Running": running,
            "Pid": process.pid if running and process else 0,
            "ExitCode": container.exit_code,
        }
        config = {"Image": container.body["Image"], "Tty": bool(container.body.get("Tty"))}
        return web.json_response({"Id": container.id, "State": state, "Config": config})

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        container = self._container(request)
        wanted = [name for name in STREAMS if request.query.get(name) in ("1", "true", "True")]
        response = web.StreamResponse(headers={"Content-Type": "application/vnd.docker.multiplexed-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        sent = dict.fromkeys(wanted, 0)
        while True:
            done = container.exited.is_set()
            for name in wanted:
                data = bytes(container.output[name][sent[name] :])
                if data:
                    sent[name] += len(data)
                    await response.write(struct.pack(">BxxxL", STREAMS[name], len(data)) + data)
            if done or container.removed:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):
                    await container.exited.wait()
        await response.write_eof()
        return response

    async def _wait(self, request: web.Request) -> web.Response:
        container = self._container(request)
        await container.exited.wait()
        return web.json_response({"StatusCode": container.exit_code, "Error": None})

    async def _stop(self, request: web.Request) -> web.Response:
        container = self._container(request)
        container.stopped = True
        self._signal(container, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(float(request.query.get("t", "10"))):
                await container.exited.wait()
        self._signal(container, signal.SIGKILL)
        return web.Response(status=204)

    async def _kill(self, request: web.Request) -> web.Response:
        self._signal(self._container(request), signal.SIGKILL)
        return web.Response(status=204)

    async def _remove(self, request: web.Request) -> web.Response:
        container = self._container(request)
        if not container.exited.is_set() and request.query.get("force") not in ("1", "true", "True"):
            return web.json_response({"message": "container is running: stop it first"}, status=409)
        self._signal(container, signal.SIGKILL)
        container.removed = True
        return web.Response(status=204)

    @staticmethod
    def _signal(container: FakeContainer, sig: signal.Signals) -> None:
        if container.process is not None and container.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(container.process.pid, sig)
