"""Socket Mode: slack_sdk's aiohttp client, told when its connection was replaced.

The SDK pings every ``ping_interval`` seconds and replaces a connection that has not answered for four
of them (or that closed, or that Slack asked to leave with ``disconnect``), but it says so only in its
own INFO lines and catches nothing up: events Slack sent into a dead socket are gone. This subclass
reports every new connection to ``on_connected`` (``replaced`` true from the second one on); the
adapter then catches the gap up (``adapters.slack.catchup``) and writes the one log line.

The SDK runs each envelope's listeners in a task of its own, started in arrival order; the adapter's
listener only queues the envelope (no await before), and one consumer hands them to the sink in that
order, acknowledging each only after the sink stored it.

The SDK retries a lost connection for ever, saying so only in its log; :attr:`ReportingSocketModeClient.up`
and :attr:`~ReportingSocketModeClient.reconnect_failure` let the adapter's ``status`` (``/readyz``) say
that the socket is down and why its reconnection attempts fail.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slack_sdk.socket_mode.aiohttp import SocketModeClient

from adapters.redaction import describe

# The SDK logs every reconnection at INFO and its failures with tracebacks; the adapter says what
# matters in one line of its own, so the SDK's logger stays at WARNING.
SDK_LOGGER = logging.getLogger("adapters.slack.sdk")
SDK_LOGGER.setLevel(logging.WARNING)


class ReportingSocketModeClient(SocketModeClient):
    """``SocketModeClient`` that calls ``on_connected(replaced)`` after each connection it opens."""

    def __init__(self, *args: object, on_connected: Callable[[bool], None], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._on_connected = on_connected
        self._connections = 0
        self.reconnect_failure = ""  # why the last request for a new connection failed ("": none since)

    @property
    def up(self) -> bool:
        """The connection is open and answers pings: the SDK's ``is_connected``, for a synchronous
        caller (``/readyz`` asks ``Adapter.status``)."""
        session, pong = self.current_session, self.last_ping_pong_time
        answering = pong is None or time.time() - pong < self.ping_interval * 4
        return not self.closed and not self.stale and session is not None and not session.closed and answering

    async def issue_new_wss_url(self) -> str:
        try:
            return await super().issue_new_wss_url()
        except Exception as exc:  # the SDK logs it and tries again later; remember it for status
            self.reconnect_failure = describe(exc, self.app_token)
            raise

    async def connect(self) -> None:
        before = self.current_session
        await super().connect()  # type: ignore[no-untyped-call]
        session = self.current_session
        if self.closed or session is None or session is before or session.closed:
            return
        self.reconnect_failure = ""
        self._connections += 1
        self._on_connected(self._connections > 1)
