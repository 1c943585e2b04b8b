"""``python -m tests.emulator --port 8765``: serve until Ctrl-C, printing one line per request.

Lets a person try Herald offline: ``ANTHROPIC_BASE_URL=http://127.0.0.1:8765`` (Anthropic) or an
OpenAI base URL of ``http://127.0.0.1:8765/v1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time

from .records import RecordedRequest
from .server import ProviderEmulator


def describe(rec: RecordedRequest) -> str:
    if rec.status != 200 or rec.error:
        return f"{rec.api} {rec.path} {rec.model} -> {rec.status} {rec.error}"
    return (
        f"{rec.api} {rec.path} {rec.model} stream={rec.stream} bp={rec.breakpoints} "
        f"prompt={rec.prompt_tokens} read={rec.cache_read} write={rec.cache_write} "
        f"input={rec.input_tokens} out={rec.output_tokens} oracle={rec.oracle_tokens}"
    )


async def run(host: str, port: int, min_cache_tokens: int | None, stream_delay: float, quiet: bool) -> None:
    overrides = {"": min_cache_tokens} if min_cache_tokens is not None else None
    emu = ProviderEmulator(min_cache_tokens=overrides)
    emu.stream_delay = stream_delay
    async with emu.serve(host, port) as base_url:
        print(f"provider emulator at {base_url} (OpenAI base URL: {base_url}/v1); Ctrl-C stops", flush=True)
        shown = 0
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.2)
            # The emulated clock follows wall time here, so TTLs behave as they would live: by the time
            # that really passed (a sleep on a busy machine lasts longer than asked, and a clock advanced
            # by the amount asked would fall behind, keeping cache entries alive past their TTL).
            now = time.monotonic()
            emu.clock.advance(now - last)
            last = now
            with emu.lock:
                new = emu.requests[shown:]
            for rec in new if not quiet else ():
                print(describe(rec), flush=True)
            shown += len(new)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--min-cache-tokens", type=int, default=None, help="one minimum for every model")
    parser.add_argument("--stream-delay", type=float, default=0.0, help="seconds between streamed events")
    parser.add_argument("--quiet", action="store_true", help="print only the start-up line")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args.host, args.port, args.min_cache_tokens, args.stream_delay, args.quiet))


if __name__ == "__main__":
    main()
