"""An offline signal-cli daemon (``daemon --http``) for the Signal adapter's tests."""

from .server import BOT, BOT_UUID, GROUP, FakeSignal

__all__ = ["BOT", "BOT_UUID", "GROUP", "FakeSignal"]
