"""The emulator's mutable state and the test-facing controls, behind one lock.

The server may run on another thread (``serve_in_thread``) while a test scripts replies or moves
the clock, so every read-modify-write of this state holds :attr:`EmulatorState.lock`. It is
re-entrant so a ``responder`` may call :meth:`EmulatorState.script` while a request is processed.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from typing import Any

from .blocks import OPENAI_MIN_PREFIX
from .cache import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MIN_CACHE_TOKENS,
    MIN_CACHE_TOKENS,
    AnthropicCache,
    Clock,
    OpenAICache,
    Oracle,
    lookup_by_prefix,
)
from .records import RecordedRequest
from .script import (
    DropFault,
    FaultQueue,
    HttpFault,
    Reply,
    Responder,
    StallFault,
    StreamFault,
    TruncateFault,
    default_reply,
)

PARTIAL_TEXT = "partial "  # what a faulted stream says before it breaks


class EmulatorState:
    """Caches, oracle, script, faults and the request log of one emulated provider."""

    def __init__(
        self,
        min_cache_tokens: dict[str, int] | None = None,
        context_windows: dict[str, int] | None = None,
        default_reply_tokens: int = 40,
    ) -> None:
        self.lock = threading.RLock()
        self.clock = Clock()
        self.requests: list[RecordedRequest] = []
        self.responder: Responder | None = None
        self.default_reply_tokens = default_reply_tokens
        self.anthropic_cache = AnthropicCache()
        self.openai_cache = OpenAICache()
        self.oracle = Oracle()
        self.faults = FaultQueue()
        self._min_overrides = dict(min_cache_tokens or {})
        self._context_windows = dict(context_windows or {})
        self._script: deque[Reply] = deque()
        self._transcripts: deque[str] = deque()
        self.transcriptions: list[Any] = []  # audio.Transcription records
        self.speeches: list[Any] = []  # speech.Speech records (POST /v1/audio/speech)
        self.edge_speeches: list[Any] = []  # speech.EdgeSpeech records (the Edge read-aloud websocket)
        self._counters: dict[str, int] = {}
        self._holds = 0  # how many of the next streamed answers stop half-way (hold_streams)
        self._releases = 0  # release_streams calls so far
        self.holding = 0  # streamed answers stopped half-way now, waiting for release_streams
        # The batch APIs (tests/emulator/batches.py): batches by id, files by id (purpose, bytes).
        self.batches: dict[str, Any] = {}
        self.files: dict[str, tuple[str, bytes]] = {}
        self.batch_delay: float | None = 0.0  # emulated seconds a batch takes; None: until end_batches()
        self.cancelled_batches: list[str] = []  # ids of batches a client asked to cancel

    # --- test controls -------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies, consumed one per successful model request (either API)."""
        with self.lock:
            self._script.extend(replies)

    def script_transcript(self, *texts: str) -> None:
        """Queue transcripts, consumed one per successful transcription request."""
        with self.lock:
            self._transcripts.extend(texts)

    def next_transcript(self) -> str | None:
        return self._transcripts.popleft() if self._transcripts else None

    def fail_next(
        self,
        status: int,
        count: int = 1,
        retry_after: float | None = None,
        api: str | None = None,
        model: str | None = None,
    ) -> None:
        """Answer the next ``count`` model requests (of ``api`` and ``model``, or any) with an HTTP error."""
        with self.lock:
            self.faults.add(HttpFault(count, api, status=status, retry_after=retry_after, model=model))

    def fail_for(self, seconds: float, status: int = 529, *, model: str | None = None) -> None:
        """An outage: answer every model request (to ``model``, or any) with an HTTP error for ``seconds``
        of the emulated clock (from now); :meth:`clear_faults` ends it early."""
        with self.lock:
            until = self.clock.now() + seconds
            fault = HttpFault(sys.maxsize, None, status=status, retry_after=None, model=model, until=until)
            self.faults.add(fault)

    def clear_faults(self) -> None:
        """Drop every queued fault: the provider is well again."""
        with self.lock:
            self.faults.clear()

    def fail_midstream(
        self,
        error_type: str = "overloaded_error",
        count: int = 1,
        after_text: str = PARTIAL_TEXT,
        api: str | None = None,
    ) -> None:
        """Make the next ``count`` streaming requests send ``after_text`` and then an error event."""
        with self.lock:
            self.faults.add(StreamFault(count, api, error_type=error_type, after_text=after_text))

    def drop_midstream(
        self,
        count: int = 1,
        after_text: str = PARTIAL_TEXT,
        api: str | None = None,
        *,
        close_delimited: bool = False,
    ) -> None:
        """Make the next ``count`` streaming requests send ``after_text``, then close the connection.

        The chunked body is left unfinished, as when a proxy or a restarting provider cuts the TCP
        connection: clients see an incomplete read, not an error event. With ``close_delimited`` the
        stream has no chunked framing (an HTTP/1.0-style hop), so the cut reads as a normal end of
        body and only the missing terminal event (``message_stop``, ``[DONE]``) gives it away.
        """
        with self.lock:
            self.faults.add(DropFault(count, api, after_text=after_text, close_delimited=close_delimited))

    def truncate_next(self, count: int = 1, api: str | None = None) -> None:
        """Send the next ``count`` model requests a JSON document cut in half, over a healthy connection.

        Streaming: well-formed first events with a little text, one ``data:`` line whose JSON is cut
        in half, then the stream ends normally. Otherwise: HTTP 200 with half of the JSON body.
        """
        with self.lock:
            self.faults.add(TruncateFault(count, api, after_text=PARTIAL_TEXT))

    def stall_next(self, seconds: float, count: int = 1, api: str | None = None) -> None:
        """Hold the next ``count`` model requests ``seconds`` before answering, to trip client timeouts.

        The held request is never processed (no cache write, no reply consumed); a client that
        waits that long gets a 504 timeout, as from a gateway in front of a hung provider.
        """
        with self.lock:
            self.faults.add(StallFault(count, api, seconds=seconds))

    def hold_streams(self, count: int = 1) -> None:
        """Stop the next ``count`` streamed answers half-way until :meth:`release_streams` (or until their
        client hangs up): a turn that is surely still running, part of its text out, when the test acts
        on it (``/stop``, a newer message, a kill). ``holding`` counts the answers waiting there now."""
        with self.lock:
            self._holds += count

    def release_streams(self) -> None:
        """Let every answer stopped by :meth:`hold_streams` finish; holds not used yet are dropped."""
        with self.lock:
            self._releases += 1
            self._holds = 0

    def take_hold(self) -> int | None:
        """For the server, as a streamed answer begins: None, or the release count it waits past."""
        with self.lock:
            if not self._holds:
                return None
            self._holds -= 1
            return self._releases

    def released(self, since: int) -> bool:
        with self.lock:
            return self._releases > since

    def end_batches(self) -> None:
        """Every batch in progress ends at its next poll (processed then, at the emulated clock's now)."""
        with self.lock:
            for batch in self.batches.values():
                if batch.state == "in_progress":
                    batch.ends_at = self.clock.now()

    def expire_batches(self) -> None:
        """Every batch in progress ends at its next poll with each of its requests expired."""
        with self.lock:
            for batch in self.batches.values():
                if batch.state == "in_progress":
                    batch.outcome = "expired"

    def reset_cache(self) -> None:
        """Drop every cache entry, as a provider eviction would (the oracle keeps its memory)."""
        with self.lock:
            self.anthropic_cache.clear()
            self.openai_cache.clear()

    @property
    def pending_replies(self) -> int:
        with self.lock:
            return len(self._script)

    # --- used by the API handlers (lock held) ----------------------------------------------------

    def min_tokens(self, model: str) -> int:
        """Minimum cacheable prefix: constructor overrides, then the built-in table, then 1024."""
        for table in (self._min_overrides, MIN_CACHE_TOKENS):
            value = lookup_by_prefix(table, model)
            if value is not None:
                return value
        return DEFAULT_MIN_CACHE_TOKENS

    def openai_min_tokens(self, model: str) -> int:
        """OpenAI-style automatic caching starts at 1024 unless the constructor says otherwise."""
        value = lookup_by_prefix(self._min_overrides, model)
        return OPENAI_MIN_PREFIX if value is None else max(value, OPENAI_MIN_PREFIX)

    def context_window(self, model: str) -> int:
        value = lookup_by_prefix(self._context_windows, model)
        return DEFAULT_CONTEXT_WINDOW if value is None else value

    def next_id(self, prefix: str) -> str:
        """Deterministic ids: ``prefix`` + a 4-digit counter per prefix."""
        n = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = n
        return f"{prefix}{n:04d}"

    def next_reply(self, body: dict[str, Any], api: str) -> Reply:
        """Script first, then the responder, then the default reply."""
        number = self._counters.get("reply", 0) + 1
        self._counters["reply"] = number
        if self._script:
            return self._script.popleft()
        if self.responder is not None:
            reply = self.responder(body, api)
            if reply is not None:
                return reply
        messages = body.get("messages")
        return default_reply(
            number, messages if isinstance(messages, list) else [], self.default_reply_tokens
        )

    def record(self, rec: RecordedRequest) -> None:
        self.requests.append(rec)
