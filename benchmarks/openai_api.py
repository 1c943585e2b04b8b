"""OpenAI-compatible API benchmark: first-token latency and answers per second through ``/v1``.

    python -m benchmarks.openai_api            # 200 latency requests, 50 conversations x 4 turns
    python -m benchmarks.openai_api --quick    # 50 latency requests, 20 conversations x 3 turns

The gateway runs in this process, opened as ``herald gateway run`` opens it (``open_gateway``) with the
API as its only way in (keys in ``api.keys``, no chat platform). The provider emulator runs in a process
of its own with no stream delay (``python -m tests.emulator --stream-delay 0``; its default answer,
~40 tokens), so its CPU is not the gateway's. The client is the real ``openai`` SDK (one
``AsyncOpenAI`` per person, as an application would keep it).

- **latency**: one request at a time, streamed, each continuing its conversation (the client sends the
  whole history, as every OpenAI client does); from the SDK's ``create`` call to the first chunk with
  text, and to the stream's end. Each conversation's first request (session creation) is a warm-up and
  not counted.
- **throughput**: ``conversations`` clients send their turns at the same moment, each its next turn as
  soon as its answer came back (streamed or not, alternating); answers per second over the wall time,
  this process's CPU time per answer (the gateway and the clients: what an answer costs whatever else
  runs on the machine), and a check that every conversation stayed one session (its history matched at
  every turn).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from dataclasses import dataclass
from tempfile import TemporaryDirectory

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from benchmarks.concurrency import QUESTION, emulator_process
from benchmarks.gateway_harness import fresh_home, ms, percentile, table
from gateway.app import Gateway, open_gateway
from gateway.config import HeraldConfig
from gateway.openai_api.server import PREFIX

MODEL = "herald"
PEOPLE = 10  # keys; conversations are spread over them
LATENCY_CONVERSATIONS = 4


@dataclass(frozen=True)
class Timing:
    first_token: float
    complete: float


def config(emulator_url: str) -> HeraldConfig:
    keys = [{"key": f"$BENCH_KEY_{n}", "person": f"api:person{n}"} for n in range(PEOPLE)]
    return HeraldConfig.model_validate(
        {
            "model": {"base_url": emulator_url},
            "gateway": {"http_port": 0},
            "review": {"enabled": False},
            "api": {"keys": keys},
        }
    )


def environ() -> dict[str, str]:
    return {f"BENCH_KEY_{n}": f"bench-key-{n:04d}-0123456789abcdef" for n in range(PEOPLE)}


def clients(gateway: Gateway) -> list[AsyncOpenAI]:
    url = gateway.http.url + PREFIX
    return [AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=60.0) for key in environ().values()]


async def streamed(client: AsyncOpenAI, messages: list[ChatCompletionMessageParam]) -> tuple[str, Timing]:
    started = time.monotonic()
    first: float | None = None
    parts: list[str] = []
    stream = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    async for chunk in stream:
        text = chunk.choices[0].delta.content if chunk.choices else None
        if text:
            first = first if first is not None else time.monotonic()
            parts.append(text)
    done = time.monotonic()
    assert first is not None, "an answer without text"
    return "".join(parts), Timing(first - started, done - started)


async def whole(client: AsyncOpenAI, messages: list[ChatCompletionMessageParam]) -> str:
    answer = await client.chat.completions.create(model=MODEL, messages=messages, stream=False)
    content = answer.choices[0].message.content
    assert content, "an answer without text"
    return content


async def latency(gateway: Gateway, requests: int) -> list[str]:
    """One streamed request at a time over a few conversations; the table row."""
    people = clients(gateway)
    histories: list[list[ChatCompletionMessageParam]] = [[] for _ in range(LATENCY_CONVERSATIONS)]
    timings: list[Timing] = []
    for n in range(requests + LATENCY_CONVERSATIONS):
        index = n % LATENCY_CONVERSATIONS
        history = histories[index]
        history.append({"role": "user", "content": f"{n}: {QUESTION}"})
        text, timing = await streamed(people[index], history)
        history.append({"role": "assistant", "content": text})
        if n >= LATENCY_CONVERSATIONS:  # each conversation's first request is a warm-up
            timings.append(timing)
    firsts = [t.first_token for t in timings]
    completes = [t.complete for t in timings]
    await close(people)
    return [
        str(len(timings)),
        ms(percentile(firsts, 50)),
        ms(percentile(firsts, 99)),
        ms(percentile(completes, 50)),
        ms(percentile(completes, 99)),
    ]


async def throughput(gateway: Gateway, conversations: int, turns: int) -> list[str]:
    """``conversations`` clients at once, ``turns`` each; the table row."""
    people = clients(gateway)

    async def converse(index: int) -> list[ChatCompletionMessageParam]:
        client = people[index % len(people)]
        history: list[ChatCompletionMessageParam] = []
        for turn in range(turns):
            history.append({"role": "user", "content": f"conversation {index}, turn {turn}: {QUESTION}"})
            text = (await streamed(client, history))[0] if turn % 2 else await whole(client, history)
            history.append({"role": "assistant", "content": text})
        return history

    before = len(await gateway.services.runtime.store.sessions.recent(100_000))
    started, cpu = time.monotonic(), time.process_time()
    histories = await asyncio.gather(*(converse(index) for index in range(conversations)))
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    sessions = await gateway.services.runtime.store.sessions.recent(100_000)
    one_session_each = len(sessions) - before == conversations
    kept = sum(len(history) for history in histories)
    await close(people)
    answers = conversations * turns
    return [
        f"{conversations} × {turns}",
        str(answers),
        f"{wall:.2f} s",
        f"{answers / wall:.1f}",
        ms(cpu / answers),
        f"{'yes' if one_session_each else 'NO'} ({len(sessions) - before} sessions, {kept} messages)",
    ]


async def close(people: list[AsyncOpenAI]) -> None:
    for client in people:
        await client.close()


async def run(requests: int, conversations: int, turns: int) -> None:
    with emulator_process(0.0) as emulator_url, TemporaryDirectory() as tmp:
        home = fresh_home(tmp)
        async with open_gateway(config(emulator_url), home, environ=environ()) as gateway:
            latency_row = await latency(gateway, requests)
            throughput_row = await throughput(gateway, conversations, turns)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"Load average at the end (1, 5, 15 min): {load}\n")
    print("Latency, one streamed request at a time:\n")
    columns = ["requests", "first token p50", "first token p99", "answer complete p50", "answer complete p99"]
    print(table(columns, [latency_row]))
    print("\nThroughput, conversations at the same moment:\n")
    columns = ["conversations × turns", "answers", "wall", "answers/s", "CPU per answer"]
    columns.append("one session per conversation")
    print(table(columns, [throughput_row]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # the emulator takes any key
    if args.quick:
        asyncio.run(run(50, 20, 3))
    else:
        asyncio.run(run(200, 50, 4))


if __name__ == "__main__":
    main()
