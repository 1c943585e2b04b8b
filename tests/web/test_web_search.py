"""web_search through run_tool against fake SearXNG, Brave and Tavily endpoints (on the fake web),
which check the request shape each API expects."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agent.tools.web.search import SearchResult, format_results
from agent.tools.web.tools import WebTools
from tests.fakes.web import BRAVE_KEY, TAVILY_KEY, FakeWeb
from tests.web_support import Contexts, call, web_tools


def names(tools: WebTools) -> list[str]:
    return [tool.name for tool in tools.tools]


async def test_searxng_results_come_back_as_a_list_in_the_untrusted_envelope(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    search = {"provider": "searxng", "searxng_url": f"{fake_web.url}/searxng/", "max_results": 2}
    async with web_tools(search=search) as tools:
        result = await call(tools, contexts(False), "web_search", query="barn owls")
    [request] = fake_web.requests
    assert (request.path, request.query) == ("/searxng/search", {"q": "barn owls", "format": "json"})
    assert not result.is_error
    assert result.content.startswith(
        '<untrusted source="SearXNG web search">\n[Content from SearXNG web search.'
    )
    assert result.content.endswith(
        '2 result(s) for "barn owls":\n'
        "\n1. Owl - Wikipedia\n   https://en.wikipedia.org/wiki/Owl\n   Owls are birds.\n"
        "\n2. Barn owl facts\n   https://birds.example/barn-owl\n   Barn owls hunt by ear.\n</untrusted>"
    )


async def test_brave_gets_its_key_in_a_header_and_the_count_as_a_parameter(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    environ = {"BRAVE_API_KEY": BRAVE_KEY}
    search = {"provider": "brave", "brave_url": f"{fake_web.url}/brave", "max_results": 1}
    async with web_tools(environ=environ, search=search) as tools:
        result = await call(tools, contexts(False), "web_search", query="owls")
    [request] = fake_web.requests
    assert request.query == {"q": "owls", "count": "1"}
    assert request.headers["X-Subscription-Token"] == BRAVE_KEY
    assert '1 result(s) for "owls":\n\n1. Owl - Wikipedia\n' in result.content


async def test_tavily_gets_a_json_body_with_key_query_and_count(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    environ = {"TAVILY_API_KEY": TAVILY_KEY}
    search = {"provider": "tavily", "tavily_url": f"{fake_web.url}/tavily", "max_results": 3}
    async with web_tools(environ=environ, search=search) as tools:
        result = await call(tools, contexts(True), "web_search", query="owl pellets")
    [request] = fake_web.requests
    assert request.method == "POST"
    assert request.json() == {"api_key": TAVILY_KEY, "query": "owl pellets", "max_results": 3}
    assert "3. Owl pellets\n   https://birds.example/pellets\n   What owls cough up." in result.content


async def test_a_refused_key_is_named_by_its_variable_never_shown_or_logged(
    fake_web: FakeWeb, contexts: Contexts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-key-that-must-not-leak"
    search = {"provider": "brave", "brave_url": f"{fake_web.url}/brave", "brave_api_key_env": "BRAVE_KEY"}
    async with web_tools(environ={"BRAVE_KEY": wrong}, search=search) as tools:
        result = await call(tools, contexts(False), "web_search", query="owls")
    assert result.is_error
    assert (
        result.content
        == "Search failed: Brave Search answered 401 Unauthorized (check the API key in BRAVE_KEY)."
    )
    assert wrong not in caplog.text


async def test_a_searxng_without_the_json_format_gets_a_hint(fake_web: FakeWeb, contexts: Contexts) -> None:
    fake_web.searxng_json = False
    async with web_tools(search={"provider": "searxng", "searxng_url": f"{fake_web.url}/searxng"}) as tools:
        result = await call(tools, contexts(False), "web_search", query="owls")
    assert result.is_error and result.content == (
        "Search failed: SearXNG answered 403 Forbidden (is the json format enabled under search.formats "
        "in its settings.yml?)."
    )


async def test_unreachable_provider_is_one_sentence(contexts: Contexts, fake_web: FakeWeb) -> None:
    search = {"provider": "searxng", "searxng_url": f"{fake_web.url}/nothing-here"}
    async with web_tools(search=search) as tools:
        missing = await call(tools, contexts(False), "web_search", query="owls")
    assert missing.is_error and missing.content == "Search failed: SearXNG answered 404 Not Found."


async def test_web_search_exists_only_when_its_provider_is_usable() -> None:
    offered = {}
    cases: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
        "none": ({}, {}),
        "searxng without a URL": ({}, {"provider": "searxng"}),
        "brave without its key": ({}, {"provider": "brave"}),
        "tavily with a blank key": ({"TAVILY_API_KEY": " "}, {"provider": "tavily"}),
        "brave": ({"BRAVE_API_KEY": "k"}, {"provider": "brave"}),
        "searxng": ({}, {"provider": "searxng", "searxng_url": "http://127.0.0.1:8888"}),
    }
    for case, (environ, search) in cases.items():
        async with web_tools(environ=environ, search=search) as tools:
            offered[case] = names(tools)
    assert offered == {
        "none": ["web_fetch"],
        "searxng without a URL": ["web_fetch"],
        "brave without its key": ["web_fetch"],
        "tavily with a blank key": ["web_fetch"],
        "brave": ["web_fetch", "web_search"],
        "searxng": ["web_fetch", "web_search"],
    }


def test_no_results_is_said_plainly() -> None:
    assert format_results("zzzq", []) == 'No results for "zzzq".'
    assert format_results("q", [SearchResult("T", "https://t.example", "")]) == (
        '1 result(s) for "q":\n\n1. T\n   https://t.example'
    )
