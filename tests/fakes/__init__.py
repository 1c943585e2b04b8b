"""Fake chat platforms for tests and benchmarks, driven by the real client libraries over loopback.

``tests.fakes.telegram.FakeTelegram`` is a Telegram Bot API server that python-telegram-bot talks
to through ``ApplicationBuilder().base_url(...)``; ``tests.fakes.discord.FakeDiscord`` is Discord's
REST API and gateway websocket, which discord.py reaches once ``FakeDiscord.patch_discord()`` has
pointed ``Route.BASE`` and ``DiscordWebSocket.DEFAULT_GATEWAY`` at it. No network beyond 127.0.0.1
is needed.
"""

from .discord import FakeDiscord
from .telegram import FakeTelegram

__all__ = ["FakeDiscord", "FakeTelegram"]
