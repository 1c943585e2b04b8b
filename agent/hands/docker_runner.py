"""Commands in a Docker container (``tools.sandbox: docker``), through the ``docker`` SDK.

Each command gets a container of its own from ``tools.sandbox_image``: the image's system read-only, a
private ``/tmp``, the workspace and ``tools.allowed_paths`` bound read-write at their own paths (so paths
agree with the file tools), run as Herald's own user (files it makes are the owner's), no capabilities,
no new privileges, network ``none`` unless ``tools.sandbox_network``, and the limits: memory and processes
by the container's cgroup, CPU time and file size by ulimits. Its environment is the command environment
less ``PATH`` and ``HOME`` (the image's own). The container is removed when the command ends or is stopped.

The SDK blocks: every call runs in a thread. Output comes from two followed log streams (stdout, stderr),
fed into asyncio stream readers as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import docker
from docker.errors import DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import Ulimit

from agent.hands.limits import SandboxLimits
from agent.hands.paths import real
from agent.hands.runner import DRAIN_SECONDS, PIPE_LIMIT, STOP_GRACE
from agent.settings import ToolsSettings

log = logging.getLogger(__name__)

DEFAULT_URL = "unix:///var/run/docker.sock"
API_TIMEOUT = 30  # seconds for each Engine API call (logs and wait follow the command: no timeout)
IMAGE_ENVIRONMENT = ("PATH", "HOME")  # the image's own, not this machine's
LABEL = "herald.sandbox"


class DockerMissing(Exception):
    """No Docker Engine (or no image) to run commands in; the message says what is missing."""


def engine_url(settings: ToolsSettings, environ: Mapping[str, str]) -> str:
    return settings.docker_url or environ.get("DOCKER_HOST") or DEFAULT_URL


def container_config(
    command: str,
    *,
    image: str,
    cwd: Path,
    env: Mapping[str, str],
    writable: tuple[Path, ...],
    network: bool,
    limits: SandboxLimits,
    user: str,
) -> dict[str, Any]:
    """The arguments of ``containers.create`` for one command (pure: what the sandbox is, in one place)."""
    return {
        "image": image,
        "command": ["/bin/sh", "-c", command],
        "working_dir": str(cwd),
        "environment": {name: value for name, value in env.items() if name not in IMAGE_ENVIRONMENT},
        "user": user,
        "volumes": {str(path): {"bind": str(path), "mode": "rw"} for path in writable},
        "network_mode": "bridge" if network else "none",
        "read_only": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "pids_limit": limits.processes,
        "ulimits": [
            Ulimit(name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds),
            Ulimit(name="fsize", soft=limits.file_mb * 2**20, hard=limits.file_mb * 2**20),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "labels": {LABEL: "1"},
        "stdin_open": False,
        "tty": False,
        "detach": True,
    }


class DockerProcess:
    """A command's container: its output streams, its end, its removal."""

    def __init__(self, container: Container, pid: int) -> None:
        self._container = container
        self._pid = pid
        self._stdout = asyncio.StreamReader(limit=PIPE_LIMIT)
        self._stderr = asyncio.StreamReader(limit=PIPE_LIMIT)
        self._exit: asyncio.Future[int] | None = None
        self._streams_open = 0
        self._streams_ended = asyncio.Event()
        self._removed = threading.Event()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self._stdout

    @property
    def stderr(self) -> asyncio.StreamReader:
        return self._stderr

    def follow(self) -> None:
        """Start feeding both log streams into the readers, and waiting for the end (threads of their own:
        the SDK's calls block for as long as the command runs, which would starve asyncio's thread pool)."""
        loop = asyncio.get_running_loop()
        self._exit = loop.create_future()
        self._streams_open = 2
        self._streams_ended = asyncio.Event()
        for reader, which in ((self._stdout, "stdout"), (self._stderr, "stderr")):
            _thread(self._feed, loop, reader, which, name=f"docker logs {which}")
        _thread(self._wait, loop, name="docker wait")

    def _feed(self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, which: str) -> None:
        chunks: Any = iter(())
        try:
            chunks = self._container.logs(
                stdout=which == "stdout", stderr=which == "stderr", stream=True, follow=True
            )
            for chunk in chunks:
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except Exception as error:  # the container went away: the stream just ends
            log.debug("docker %s of %s ended: %s", which, self._container.short_id, error)
        finally:
            with contextlib.suppress(Exception):
                chunks.close()
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads any more
                loop.call_soon_threadsafe(reader.feed_eof)
                loop.call_soon_threadsafe(self._stream_ended)

    def _stream_ended(self) -> None:
        self._streams_open -= 1
        if self._streams_open == 0:
            self._streams_ended.set()

    def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            code: int | BaseException = int(self._container.wait().get("StatusCode", -1))
        except Exception as error:  # removed meanwhile (stopped): the command did not end by itself
            code = error
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, self._exit, code)

    async def wait(self) -> int:
        assert self._exit is not None, "follow() starts it"
        return await asyncio.shield(self._exit)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop the container unless it ended; once its output was read to the end, remove it."""
        if self._exit is not None and not self._exit.done():
            await asyncio.to_thread(self._stop, grace)
        with contextlib.suppress(TimeoutError):  # a container's logs outlive it, not its removal
            async with asyncio.timeout(DRAIN_SECONDS):
                await self._streams_ended.wait()
        await asyncio.to_thread(self._remove)

    def _stop(self, grace: float) -> None:
        with contextlib.suppress(DockerException):
            self._container.stop(timeout=max(1, round(grace)))  # SIGTERM, SIGKILL after grace

    def _remove(self) -> None:
        if self._removed.is_set():
            return
        with contextlib.suppress(NotFound):
            self._container.remove(force=True)
        self._removed.set()

    def kill_now(self) -> None:
        """Remove the container (killing it) in a thread of its own: a cancelled turn cannot wait."""

        def remove() -> None:
            try:
                self._remove()
            except Exception:
                log.exception("removing container %s failed", self._container.short_id)

        _thread(remove, name="docker remove")


def _thread(target: Callable[..., None], *args: Any, name: str) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


def _settle(future: asyncio.Future[int] | None, outcome: int | BaseException) -> None:
    if future is None or future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class DockerRunner:
    """Runs each command in a fresh container. Build it with :meth:`find`, which checks the Engine."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        image: str,
        writable: tuple[Path, ...],
        network: bool,
        limits: SandboxLimits,
        url: str,
    ) -> None:
        self.client = client
        self.image = image
        self.writable = writable
        self.network = network
        self.limits = limits
        self.url = url

    def __str__(self) -> str:
        network = "with the network" if self.network else "without network"
        limits = self.limits
        return (
            f"the Docker Engine at {self.url} runs {self.image} {network}, {limits.cpu_seconds} s CPU, "
            f"{limits.memory_mb} MB memory, {limits.file_mb} MB files, {limits.processes} processes"
        )

    @classmethod
    def find(
        cls, settings: ToolsSettings, *, workspace: Path, environ: Mapping[str, str], limits: SandboxLimits
    ) -> DockerRunner:
        """The runner, once the Engine answered and has the image; :class:`DockerMissing` saying why not."""
        url = engine_url(settings, environ)
        parsed = urlparse(url)
        if parsed.scheme in ("unix", "http+unix") and not os.path.exists(parsed.path):
            raise DockerMissing(f"the Docker socket {parsed.path} is absent (is the Docker Engine running?)")
        try:
            client = docker.DockerClient(base_url=url, timeout=API_TIMEOUT)
            client.ping()
        except DockerException as error:
            raise DockerMissing(f"the Docker Engine at {url} does not answer ({error})") from None
        try:
            client.images.get(settings.sandbox_image)
        except ImageNotFound:
            client.close()
            raise DockerMissing(
                f"the image {settings.sandbox_image} is not there: docker pull {settings.sandbox_image}"
            ) from None
        except DockerException as error:
            client.close()
            raise DockerMissing(f"the Docker Engine at {url} fails ({error})") from None
        writable = tuple(dict.fromkeys([real(workspace), *(real(path) for path in settings.allowed_paths)]))
        return cls(
            client,
            image=settings.sandbox_image,
            writable=writable,
            network=settings.sandbox_network,
            limits=limits,
            url=url,
        )

    async def spawn(self, command: str, *, cwd: Path, env: Mapping[str, str]) -> DockerProcess:
        config = container_config(
            command,
            image=self.image,
            cwd=cwd,
            env=env,
            writable=self.writable,
            network=self.network,
            limits=self.limits,
            user=f"{os.getuid()}:{os.getgid()}",
        )
        try:
            container = await asyncio.to_thread(self._start, config)
        except DockerException as error:
            raise OSError(f"the container could not start: {error}") from None
        process = DockerProcess(container, int(container.attrs.get("State", {}).get("Pid") or 0))
        process.follow()
        return process

    def _start(self, config: dict[str, Any]) -> Container:
        container = self.client.containers.create(**config)
        try:
            container.start()
            container.reload()  # its State.Pid, now that it runs
        except BaseException:
            with contextlib.suppress(DockerException):
                container.remove(force=True)
            raise
        return container
