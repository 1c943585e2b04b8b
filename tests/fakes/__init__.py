"""Fake chat platforms for tests and benchmarks, driven by the real client libraries over loopback.

``tests.fakes.telegram.FakeTelegram`` is a Telegram Bot API server that python-telegram-bot talks
to through ``ApplicationBuilder().base_url(...)``; no network beyond 127.0.0.1 is needed.
"""

from .telegram import FakeTelegram

__all__ = ["FakeTelegram"]
