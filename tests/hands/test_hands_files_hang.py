"""The file tools never hang: a FIFO, a socket or a device is refused before it is opened, searches walk
past them, the file tools have threads of their own, and ``/readyz`` says when those are all stuck.

Before, ``mkfifo pipe`` then ``read_file pipe`` blocked a thread for good; six of them filled the
default executor and new chats got no answer while ``/readyz`` said ok. Real python-telegram-bot
against the fake Bot API, the real anthropic SDK against the emulator."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from pathlib import Path

import aiohttp
import pytest

from agent.hands import file_pool
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.waiting import wait_until
from tests.gateway_support import ADMIN, telegram_gateway
from tests.hands.test_hands_gateway import hands, results

pytestmark = pytest.mark.timeout(90)


def texts(request_results: list[dict[str, object]]) -> list[str]:
    return [str(block["content"]) for block in request_results]


async def test_fifos_sockets_and_devices_are_refused_and_searched_past_and_chats_go_on(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "notes.txt").write_text("the needle is here\n")
    os.mkfifo(workspace / "pipe")
    os.mkfifo(workspace / "src" / "fifo")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(workspace / "src" / "service.sock"))
    reads = [ToolUse("read_file", {"path": "pipe"}) for _ in range(6)]
    emulator.script(
        Reply(tool_calls=[*reads, ToolUse("read_file", {"path": "src/service.sock"})]),
        Reply(tool_calls=[ToolUse("search_files", {"pattern": "needle", "path": "src"})]),
        Reply(tool_calls=[ToolUse("patch_file", {"path": "pipe", "old": "a", "new": "b"})]),
        Reply(text="Those are pipes."),
        Reply(text="Still here."),
    )
    try:
        async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
            harness.fake.private_message(ADMIN, "read the pipe")
            await harness.settled()
            harness.fake.private_message(ADMIN, "are you still there?")
            await harness.settled()
    finally:
        listening.close()

    refusals, searched, patched = (texts(results(emulator.requests[n])) for n in (1, 2, 3))
    not_regular = "is not a regular file (a pipe, a socket or a device); the file tools read and write "
    assert refusals == [f"'pipe' {not_regular}regular files only."] * 6 + [
        f"'src/service.sock' {not_regular}regular files only."
    ]
    assert searched == ["1 matching line(s) in 1 file(s) under src:\nsrc/notes.txt:1: the needle is here"]
    assert patched[0].startswith("'pipe' is not a regular file")
    assert harness.texts(ADMIN)[-2:] == ["Those are pipes.", "Still here."]


async def test_readyz_says_when_every_file_thread_is_stuck_and_a_call_then_is_refused_at_once(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(file_pool, "STUCK_SECONDS", 0.0)  # stuck at once: no waiting a minute
    monkeypatch.setattr(file_pool, "QUEUE_SECONDS", 0.5)  # nor half a minute for a free thread
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("text\n")
    hung = threading.Event()  # a disk that does not answer, until set
    sections = hands(workspace)
    sections["gateway"] = {**sections.get("gateway", {}), "http_port": 0}
    emulator.script(
        Reply(tool_calls=[ToolUse("read_file", {"path": "a.txt"})]),
        Reply(text="The file tools are busy."),
    )

    async def readyz(url: str) -> tuple[int, str]:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as client, client.get(url + "/readyz") as response:
            return response.status, await response.text()

    async with telegram_gateway(home, emulator, emulator_url, **sections) as harness:
        runtime_hands = harness.gateway.services.runtime.hands
        assert runtime_hands is not None
        pool = runtime_hands.files.pool
        url = harness.gateway.http.url
        before = await readyz(url)
        stuck = [asyncio.create_task(pool.run(hung.wait)) for _ in range(pool.workers)]
        await wait_until(lambda: pool.starved() is not None, what="every file thread taken")
        during = await readyz(url)
        harness.fake.private_message(ADMIN, "read a.txt")
        await harness.settled()
        hung.set()
        await asyncio.gather(*stuck)
        after = await readyz(url)

    assert before[0] == 200 and after[0] == 200
    assert during[0] == 503 and "file tools: all 4 threads stuck" in during[1]
    [refusal] = texts(results(emulator.requests[1]))
    assert refusal.startswith("The file tools are busy: 4 operations are still running")
    assert harness.texts(ADMIN)[-1] == "The file tools are busy."
