"""A fake Matrix homeserver (the client-server API a bot uses) on 127.0.0.1, driven through mautrix.

``state`` holds people, rooms, the event stream and media; ``server`` serves them over aiohttp.
"""

from .server import FakeMatrix
from .state import BOT, BOT_NAME, SERVER

__all__ = ["BOT", "BOT_NAME", "SERVER", "FakeMatrix"]
