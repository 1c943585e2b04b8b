"""Offline Discord (REST API + gateway websocket) for one bot, as discord.py sees Discord.

It keeps the semantics our gateway depends on: IDENTIFY with intents (4014 when a privileged
intent is not enabled), READY + GUILD_CREATE, zlib-stream compression, sequence numbers and RESUME
with replay, op 7/op 9 reconnects, 429s discord.py retries (``Via`` + ``retry_after``), Discord's
validation errors (2000 characters, empty messages), ``allowed_mentions``, slash-command syncs and
interactions answered once within 3 s. See shared/notes/platforms.md for the facts behind it.

Typical use::

    fake = FakeDiscord()
    async with fake.serve():
        with fake.patch_discord():
            client = discord.Client(intents=intents, guild_ready_timeout=0.05)
            await client.login(fake.token)
            task = asyncio.create_task(client.connect())
            async with asyncio.timeout(30):
                await client.wait_until_ready()
            fake.guild_message(fake.channel_id, 42, "hi", mention_bot=True)
            sent = await fake.wait_for(lambda: fake.messages(fake.channel_id))
            await client.close()

discord.py sleeps 5 s before every IDENTIFY but the first (``Client.before_identify_hook``) and
fires ``on_ready`` ``guild_ready_timeout`` (2 s) after the last GUILD_CREATE: override both in
tests that reconnect or start often.
"""

from ..waiting import WaitTimeout
from .records import (
    Attachment,
    CommandSync,
    Dispatch,
    GatewayConnection,
    InteractionResponse,
    RecordedCall,
    SentMessage,
    TypingEvent,
)
from .server import DiscordUrls, FakeDiscord
from .sessions import DIRECT_MESSAGES, GUILD_MEMBERS, GUILD_MESSAGES, GUILDS, MESSAGE_CONTENT
from .state import DEFAULT_TOKEN

__all__ = [
    "DEFAULT_TOKEN",
    "DIRECT_MESSAGES",
    "GUILDS",
    "GUILD_MEMBERS",
    "GUILD_MESSAGES",
    "MESSAGE_CONTENT",
    "Attachment",
    "CommandSync",
    "DiscordUrls",
    "Dispatch",
    "FakeDiscord",
    "GatewayConnection",
    "InteractionResponse",
    "RecordedCall",
    "SentMessage",
    "TypingEvent",
    "WaitTimeout",
]
