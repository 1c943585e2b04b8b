"""A gateway serving the OpenAI-compatible API, driven through the real ``openai`` SDK.

The gateway runs with no chat platform at all (the API alone is enough to serve), its model the
provider emulator; each person of :data:`PEOPLE` has a key of their own in the environment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from openai import AsyncOpenAI

from agent.api import SessionRecord
from gateway.app import Gateway, open_gateway
from gateway.home import HeraldHome
from gateway.openai_api.server import PREFIX
from tests.conftest import make_config
from tests.emulator import ProviderEmulator

# name -> (person, key); the owner is an admin (gateway.admins), the others guests
PEOPLE = {
    "owner": ("api:owner", "owner-key-0123456789abcdef"),
    "alice": ("api:alice", "alice-key-0123456789abcdef"),
    "bob": ("api:bob", "bob-key-0123456789abcdef"),
}
ADMIN = PEOPLE["owner"][0]


@dataclass
class ApiHarness:
    gateway: Gateway
    emulator: ProviderEmulator
    clients: list[AsyncOpenAI] = field(default_factory=list)  # closed with the harness

    @property
    def url(self) -> str:
        """The API's base URL, as a client configures it (``.../v1``)."""
        return self.gateway.http.url + PREFIX

    def client(self, who: str = "alice", *, key: str | None = None, **options: Any) -> AsyncOpenAI:
        """An openai SDK client with ``who``'s key (or ``key``); no retries unless asked, so a test sees
        each answer as the gateway gave it."""
        options.setdefault("max_retries", 0)
        options.setdefault("timeout", 30.0)
        client = AsyncOpenAI(base_url=self.url, api_key=key or PEOPLE[who][1], **options)
        self.clients.append(client)  # an SDK client left open is closed when collected, maybe on a
        return client  # later test's event loop, which fails there ("Event loop is closed")

    async def post(
        self, body: bytes | str, *, who: str = "alice", path: str = "/chat/completions"
    ) -> tuple[int, Any]:
        """A raw POST (what the SDK would never send): the status and the JSON body."""
        headers = {"Authorization": f"Bearer {PEOPLE[who][1]}", "Content-Type": "application/json"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + path, data=body, headers=headers) as response,
        ):
            return response.status, await response.json(content_type=None)

    async def sessions(self, who: str) -> list[SessionRecord]:
        """Every session of ``who``'s API conversations, oldest first."""
        store = self.gateway.services.runtime.store
        person = PEOPLE[who][0]
        found = [
            s
            for s in await store.sessions.recent(1000)
            if s.platform == "api" and f"api:{s.user_id}" == person
        ]
        return sorted(found, key=lambda s: s.created_at)

    async def history(self, session: SessionRecord) -> list[tuple[str, str]]:
        """The session's conversation as stored now (active messages): (role, text)."""
        messages = await self.gateway.services.runtime.store.messages.load(session.id)
        return [(m.role, m.content) for m in messages]


def api_config(emulator_url: str, people: Sequence[str] = tuple(PEOPLE), **sections: Any) -> Any:
    keys = [{"key": f"$HERALD_API_KEY_{name.upper()}", "person": PEOPLE[name][0]} for name in people]
    api = {"keys": keys, **sections.pop("api", {})}
    gateway = {"admins": [ADMIN], "http_port": 0, **sections.pop("gateway", {})}
    return make_config(emulator_url, gateway=gateway, api=api, **sections)


@asynccontextmanager
async def api_gateway(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, **sections: Any
) -> AsyncIterator[ApiHarness]:
    """A running gateway whose only way in is the API."""
    config = api_config(emulator_url, **sections)
    environ = {f"HERALD_API_KEY_{name.upper()}": key for name, (_, key) in PEOPLE.items()}
    async with open_gateway(config, home, environ=environ) as gateway:
        harness = ApiHarness(gateway, emulator)
        try:
            yield harness
        finally:
            for client in harness.clients:
                await client.close()
