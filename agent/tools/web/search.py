"""``web_search`` providers behind one small interface: SearXNG (self-hosted), Brave and Tavily.

Which one is used is the owner's choice (``web.search``); the tool exists only when the chosen one is
usable (its URL or API key is there), so a session never advertises a search that always fails.
A provider's endpoint is configuration the owner wrote, so it is not subject to the SSRF rule (a
SearXNG on localhost is the usual setup). API keys travel in a header or the request body, never in
a URL, and are never put in a log line or an error message.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.settings import WebSearchSettings
from agent.tools.registry import ToolError
from agent.tools.web.extract import summary_text

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

SNIPPET_CHARS = 400


class SearchError(ToolError):
    """A search failed; one sentence naming the provider and the reason (never a key)."""


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str  # plain text


def results_from(items: object, snippet_key: str) -> list[SearchResult]:
    """Results from a provider's list of ``{"title", "url", snippet_key}`` objects; items without a
    URL are skipped, markup in snippets is removed."""
    if not isinstance(items, list):
        return []
    results = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item["url"]:
            continue
        title = summary_text(str(item.get("title") or ""), SNIPPET_CHARS) or item["url"]
        snippet = summary_text(str(item.get(snippet_key) or ""), SNIPPET_CHARS)
        results.append(SearchResult(title=title, url=item["url"], snippet=snippet))
    return results


def format_results(query: str, results: list[SearchResult]) -> str:
    """Results as a numbered list: title, URL, snippet."""
    if not results:
        return f'No results for "{query}".'
    lines = [f'{len(results)} result(s) for "{query}":']
    for number, result in enumerate(results, start=1):
        lines += ["", f"{number}. {result.title}", f"   {result.url}"]
        if result.snippet:
            lines.append(f"   {result.snippet}")
    return "\n".join(lines)


class SearchProvider(ABC):
    """One search service. ``name`` is how errors and results name it."""

    name: str
    hint_when_refused = ""  # added to a 401/403 error: what to check
    list_price = 0.0  # USD per search when ``web.search.price_per_query`` is null

    def __init__(self, client: httpx.AsyncClient, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.price_per_query = self.list_price  # a paid service (``agent.paid``): what one search costs

    @abstractmethod
    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        """At most ``max_results`` results for ``query``; SearchError when the service fails."""

    async def request_json(self, method: str, url: str, **kwargs: Any) -> Any:
        """The JSON answer of one request; every failure is a SearchError naming the provider."""
        import httpx  # loaded with the client already (search_client); imported here for its errors

        from agent.tools.web.fetch import error_text

        try:
            async with asyncio.timeout(self.timeout):
                response = await self.client.request(method, url, **kwargs)
        except (TimeoutError, httpx.TimeoutException):
            raise SearchError(
                f"Search failed: {self.name} gave no answer within {self.timeout:g} seconds "
                "(web.search.timeout)."
            ) from None
        except httpx.HTTPError as error:  # its text may name the service's address: the owner's business
            log.warning("web search: could not reach %s at %s: %s", self.name, url, error_text(error))
            raise SearchError(f"Search failed: could not reach {self.name}; try again later.") from None
        if response.status_code >= 400:
            hint = (
                f" ({self.hint_when_refused})"
                if response.status_code in (401, 403) and self.hint_when_refused
                else ""
            )
            raise SearchError(
                f"Search failed: {self.name} answered {response.status_code} {response.reason_phrase}{hint}."
            )
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise SearchError(f"Search failed: {self.name} did not answer with JSON.") from None


class SearxngSearch(SearchProvider):
    name = "SearXNG"
    hint_when_refused = "is the json format enabled under search.formats in its settings.yml?"

    def __init__(self, client: httpx.AsyncClient, timeout: float, base_url: str) -> None:
        super().__init__(client, timeout)
        self.endpoint = base_url.rstrip("/") + "/search"

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        data = await self.request_json("GET", self.endpoint, params={"q": query, "format": "json"})
        items = data.get("results") if isinstance(data, dict) else None
        return results_from(items, "content")[:max_results]


class KeyedSearch(SearchProvider):
    """A hosted search API at ``url`` that takes an API key (kept out of every message)."""

    def __init__(
        self, client: httpx.AsyncClient, timeout: float, url: str, api_key: str, key_env: str
    ) -> None:
        super().__init__(client, timeout)
        self.url = url
        self._api_key = api_key
        self.hint_when_refused = f"check the API key in {key_env}"


class BraveSearch(KeyedSearch):
    name = "Brave Search"
    list_price = 0.005  # "Data for AI" plans: $5 per 1,000 queries

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        data = await self.request_json(
            "GET",
            self.url,
            params={"q": query, "count": max_results},
            headers={"X-Subscription-Token": self._api_key, "Accept": "application/json"},
        )
        web = data.get("web") if isinstance(data, dict) else None
        items = web.get("results") if isinstance(web, dict) else None
        return results_from(items, "description")[:max_results]


class TavilySearch(KeyedSearch):
    name = "Tavily"
    list_price = 0.008  # one credit per basic search, $0.008 a credit pay-as-you-go

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        data = await self.request_json(
            "POST", self.url, json={"api_key": self._api_key, "query": query, "max_results": max_results}
        )
        items = data.get("results") if isinstance(data, dict) else None
        return results_from(items, "content")[:max_results]


def key_variable(settings: WebSearchSettings) -> str | None:
    """The environment variable holding the configured provider's API key (None: it takes none)."""
    if settings.provider == "brave":
        return settings.brave_api_key_env
    return settings.tavily_api_key_env if settings.provider == "tavily" else None


def unusable(settings: WebSearchSettings, environ: Mapping[str, str]) -> str | None:
    """Why the configured provider cannot be used (what is missing), or None when it can (or none is set)."""
    if settings.provider == "searxng" and not settings.searxng_url:
        return "web.search.provider is searxng but web.search.searxng_url is not set"
    key_env = key_variable(settings)
    if key_env is not None and not environ.get(key_env, "").strip():
        return f"web.search.provider is {settings.provider} but {key_env} is not set"
    return None


def search_provider(
    settings: WebSearchSettings, environ: Mapping[str, str], client: httpx.AsyncClient
) -> SearchProvider | None:
    """The configured provider, or None when there is none or it is not usable (logged once, here)."""
    missing = unusable(settings, environ)
    if missing is not None:
        log.warning("%s: no web_search", missing)
        return None
    provider: SearchProvider
    if settings.provider == "searxng" and settings.searxng_url:
        provider = SearxngSearch(client, settings.timeout, settings.searxng_url)
    else:
        key_env = key_variable(settings)
        if key_env is None:
            return None  # no provider configured
        api_key = environ.get(key_env, "").strip()
        if settings.provider == "brave":
            provider = BraveSearch(client, settings.timeout, settings.brave_url, api_key, key_env)
        else:
            provider = TavilySearch(client, settings.timeout, settings.tavily_url, api_key, key_env)
    if settings.price_per_query is not None:
        provider.price_per_query = settings.price_per_query
    return provider
