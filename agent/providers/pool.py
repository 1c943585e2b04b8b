"""Provider clients shared by sessions, so each session talks to exactly its own provider and model.

A session is built for one model (its prompt names it, its cache lives with it), so every request of
the session goes to that model, whatever the configuration says today. Clients are pooled by provider,
model and endpoint: a hundred chats on one model share one SDK client and its connection pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from agent.model.provider import Provider

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderKey:
    """Which client: ``provider`` ("anthropic" | "openai"), ``model``, and an endpoint override.

    ``base_url=None`` means the endpoint configured for that provider (or the SDK default);
    ``api_key_env=None`` the variable configured for that provider's key (a fallback model may name its
    own).
    """

    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None


ProviderFactory = Callable[[ProviderKey], Provider]
"""Builds a client. Raises ``ProviderError(kind="configuration")`` when it cannot (no API key...)."""


class ProviderPool:
    """Creates clients on first use and closes them all on exit (``async with pool``).

    Contract: ``get`` never performs I/O and returns the same client for the same key; it raises what
    the factory raises. ``aclose`` closes every client once; ``get`` after ``aclose`` is an error.
    """

    def __init__(self, factory: ProviderFactory) -> None:
        self._factory = factory
        self._clients: dict[ProviderKey, Provider] = {}
        self._closed = False

    def get(self, key: ProviderKey) -> Provider:
        if self._closed:
            raise RuntimeError("the provider pool is closed")
        client = self._clients.get(key)
        if client is None:
            client = self._factory(key)
            self._clients[key] = client
            log.debug(
                "provider client for %s/%s (%s) created", key.provider, key.model, key.base_url or "default"
            )
        return client

    def for_session(self, provider: str, model: str) -> Provider:
        return self.get(ProviderKey(provider, model))

    @property
    def size(self) -> int:
        return len(self._clients)

    async def aclose(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        results = await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                log.warning("closing a provider client failed: %s", result)

    async def __aenter__(self) -> ProviderPool:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
