"""`herald doctor`: each problem of a home with what is wrong and how to fix it; exit 0 only when all
is fine. It changes nothing, so it is safe on a damaged home."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import yaml
from aiohttp import web

from gateway.config import HeraldConfig
from gateway.doctor.findings import DoctorContext, Finding
from gateway.doctor.provider import Answer, Endpoint, check_provider, judge_model_list, judge_request
from gateway.doctor.run import (
    check_config,
    check_home,
    check_keys,
    default_checks,
    run_doctor,
)
from gateway.doctor.web import check_web_search
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.fakes.web import BRAVE_KEY, TAVILY_KEY, FakeWeb
from tests.helpers import point_at
from tests.threaded import serve_in_thread

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def test_a_healthy_home_passes(emulator: ProviderEmulator, served: str, home: HeraldHome, herald) -> None:
    point_at(home, served)
    herald("chat", "-q", "hi")  # a real database to check
    result = herald("doctor")
    assert result.returncode == 0, result.stdout
    assert result.stdout.endswith("All checks passed.\n")
    for subject in ("home", "config", "database", "keys", "provider"):
        assert f"[ok]   {subject}: " in result.stdout
    assert f"[ok]   provider: {served} answered the model list (" in result.stdout
    assert "[skip] web search: not enabled (web.search.provider is not set).\n" in result.stdout


@pytest.mark.sqlite_itself  # a damaged state.db
def test_problems_are_listed_with_what_to_do(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    home.db_path.write_bytes(b"garbage" * 1000)
    home.db_path.chmod(0o600)
    before = sorted(p.name for p in home.root.iterdir())
    result = herald("doctor", "--offline")
    assert result.returncode == 1
    assert (
        f"[FAIL] database: {home.db_path} is damaged (file is not a database); to start fresh:"
        in result.stdout
    )
    assert "[FAIL] keys: No API key for anthropic: set ANTHROPIC_API_KEY" in result.stdout
    assert "[skip] provider: not checked (--offline)." in result.stdout
    assert result.stdout.endswith("2 problem(s): see above for how to fix each.\n")
    assert sorted(p.name for p in home.root.iterdir()) == before  # doctor changed nothing


def test_an_invalid_config_is_reported_and_what_depends_on_it_skipped(home: HeraldHome, herald) -> None:
    home.config_path.write_text("model:\n  provider: antropic\n")
    result = herald("doctor")
    assert result.returncode == 1
    assert "[FAIL] config: " in result.stdout and "model.provider = 'antropic'" in result.stdout
    assert "[skip] keys: not checked: config.yaml is invalid" in result.stdout
    assert "[skip] provider: not checked: config.yaml is invalid" in result.stdout


def test_an_unreachable_provider_fails_with_what_to_check(home: HeraldHome, herald) -> None:
    point_at(home, "http://127.0.0.1:9")  # nothing listens on the discard port
    result = herald("doctor")
    assert result.returncode == 1
    assert "[FAIL] provider: cannot reach http://127.0.0.1:9" in result.stdout
    assert "`herald doctor --offline`" in result.stdout


def test_an_openai_endpoint_without_v1_gets_a_hint(
    served: str, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    herald("config", "set", "model.provider", "openai")
    herald("config", "set", "model.name", "gpt-5")
    monkeypatch.setenv("OPENAI_BASE_URL", served)
    result = herald("doctor")
    assert result.returncode == 1
    assert f"try OPENAI_BASE_URL={served}/v1" in result.stdout


def test_status_answers_are_explained() -> None:
    anthropic = Endpoint("anthropic", "claude-sonnet-4-6", "ANTHROPIC_API_KEY", "https://x")
    openai = Endpoint("openai", "gpt-5", "OPENAI_API_KEY", "https://x/v1")
    body = {"error": {"type": "authentication_error", "message": "bad\nkey"}}
    refused = Answer(401, "application/json", body)
    assert judge_model_list(anthropic, refused, 5) == Finding(
        "fail", "provider", "https://x refused the API key (HTTP 401: bad key); check ANTHROPIC_API_KEY."
    )
    busy = judge_model_list(anthropic, Answer(529), 5)
    assert busy is not None and busy.status == "warn"
    not_there = Answer(404, "text/plain")
    assert judge_model_list(openai, not_there, 5) is None  # no model list proves nothing: ask the model
    answered = Answer(200, "application/json", {"choices": []})
    assert judge_request(openai, answered, not_there, 5).status == "ok"
    assert judge_request(openai, not_there, not_there, 5).status == "fail"
    answered_html = judge_request(anthropic, Answer(200, "text/html; charset=utf-8"), not_there, 5)
    assert answered_html.status == "fail" and "with a web page (HTTP 200)" in answered_html.text


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """A small server on 127.0.0.1 answering every request with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


async def a_web_site(request: web.Request) -> web.StreamResponse:
    page = "<!doctype html><html><body><h1>Welcome</h1></body></html>"
    return web.Response(text=page, content_type="text/html")


async def a_refused_key(request: web.Request) -> web.StreamResponse:
    """Refuses any key, repeating it in its message as some servers do."""
    given = request.headers.get("x-api-key") or request.headers["authorization"].removeprefix("Bearer ")
    error = {"type": "authentication_error", "message": f"invalid x-api-key {given}"}
    return web.json_response({"type": "error", "error": error}, status=401)


async def never_answers(request: web.Request) -> web.StreamResponse:
    await asyncio.Event().wait()  # cancelled when the client hangs up
    raise AssertionError("unreachable")


async def provider_finding(home: HeraldHome, provider: str, url: str, seconds: float = 5.0) -> Finding:
    """What `herald doctor` says of the provider for a config pointed at ``url``."""
    model = {"provider": provider, "name": "claude-sonnet-4-6" if provider == "anthropic" else "gpt-5"}
    model["base_url"] = url if provider == "anthropic" else f"{url}/v1"
    config = HeraldConfig.model_validate({"model": model})
    environ = {"ANTHROPIC_API_KEY": "test-key", "OPENAI_API_KEY": "test-key"}
    context = DoctorContext(home, environ, offline=False, config=config, timeout=seconds)
    [finding] = await check_provider(context)
    return finding


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_server_that_is_not_the_api_fails_the_provider_check_in_one_sentence(
    home: HeraldHome, provider: str
) -> None:
    """Before, any 404 was "[ok] provider" and an HTML page ended the check in an AttributeError."""
    base = "model.base_url or " + ("ANTHROPIC_BASE_URL" if provider == "anthropic" else "OPENAI_BASE_URL")
    model = "claude-sonnet-4-6" if provider == "anthropic" else "gpt-5"
    async with serving(not_found) as url:
        finding = await provider_finding(home, provider, url)
    endpoint = url if provider == "anthropic" else f"{url}/v1"
    assert finding == Finding(
        "fail",
        "provider",
        f"{endpoint} answered HTTP 404 to the model list and to a one-token request to {model}; it is not "
        f"the {'Anthropic' if provider == 'anthropic' else 'OpenAI-compatible'} API or does not know the "
        f"model: check the endpoint ({base}) and model.name.",
    )
    async with serving(a_web_site) as url:
        finding = await provider_finding(home, provider, url)
    endpoint = url if provider == "anthropic" else f"{url}/v1"
    assert finding.status == "fail"
    assert finding.text.startswith(f"{endpoint} answered the model list with a web page (HTTP 200), not the ")
    assert finding.text.endswith(f"API; check the endpoint ({base}).")


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_refused_key_and_a_server_that_hangs_are_failures_that_say_what_to_check(
    home: HeraldHome, provider: str
) -> None:
    variable = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    async with serving(a_refused_key) as url:
        refused = await provider_finding(home, provider, url)
    async with serving(never_answers) as url:
        hung = await provider_finding(home, provider, url, seconds=0.5)
    endpoint = url if provider == "anthropic" else f"{url}/v1"
    assert refused.status == "fail"
    said = "invalid x-api-key [REDACTED]"  # the server repeated the key
    assert refused.text.endswith(f"refused the API key (HTTP 401: {said}); check {variable}.")
    assert "test-key" not in refused.text
    assert hung.status == "fail"
    assert hung.text.startswith(f"{endpoint} did not answer within 0.5 s; check the endpoint (model.base_url")


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_base_url_that_is_no_url_is_a_failure_that_says_so(home: HeraldHome, provider: str) -> None:
    finding = await provider_finding(home, provider, "http://[::1")
    assert finding.status == "fail"
    said = "is not a URL that can be used (Invalid port: ':1'); fix the endpoint (model.base_url"
    assert said in finding.text


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("model_list", [True, False])
async def test_the_real_api_passes_with_or_without_a_model_list(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, provider: str, model_list: bool
) -> None:
    """A compatible server without GET /models is asked a one-token question instead, which it answers."""
    emulator.model_list = model_list
    finding = await provider_finding(home, provider, emulator_url)
    endpoint = emulator_url if provider == "anthropic" else f"{emulator_url}/v1"
    assert finding.status == "ok", finding.text
    if model_list:
        assert finding.text.startswith(f"{endpoint} answered the model list (")
        assert emulator.requests == []  # the list is free: no model request was made
    else:
        model = "claude-sonnet-4-6" if provider == "anthropic" else "gpt-5"
        request_line = f"a one-token request to {model}."
        assert finding.text == f"{endpoint} has no model list (HTTP 404), but answered {request_line}"
        [request] = emulator.requests
        limit = "max_tokens" if provider == "anthropic" else "max_completion_tokens"
        assert (request.model, request.json[limit]) == (model, 1)


def test_doctor_prints_a_web_page_answer_as_one_line(home: HeraldHome, herald) -> None:
    """Through the command: no internal error, one line saying what is wrong."""

    async def serve_site() -> AsyncIterator[str]:
        async with serving(a_web_site) as url:
            yield url

    with serve_in_thread(asynccontextmanager(serve_site), "a web site") as url:
        point_at(home, url)
        result = herald("doctor")
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if "] provider: " in line]
    assert line.startswith(f"[FAIL] provider: {url} answered the model list with a web page (HTTP 200)")
    assert "Error" not in result.stdout


async def test_more_checks_plug_in_and_a_broken_check_hides_nothing(home: HeraldHome) -> None:
    """The seam the gateway uses for its platform-token checks."""

    async def check_tokens(ctx: DoctorContext) -> list[Finding]:
        return [Finding("fail", "telegram", "the bot token was refused; get a new one from @BotFather.")]

    async def check_broken(ctx: DoctorContext) -> list[Finding]:
        raise RuntimeError("boom")

    out = io.StringIO()
    code = await run_doctor(home, offline=True, out=out, checks=[check_home, check_broken, check_tokens])
    assert code == 1
    assert out.getvalue().splitlines() == [
        f"[ok]   home: {home.root} is private and writable.",
        "[FAIL] broken: the check failed: RuntimeError: boom",
        "[FAIL] telegram: the bot token was refused; get a new one from @BotFather.",
        "2 problem(s): see above for how to fix each.",
    ]
    assert [check.__name__ for check in default_checks()] == [
        "check_home",
        "check_config",
        "check_storage",
        "check_redis",
        "check_keys",
        "check_api_keys",
        "check_provider",
    ]


def test_speech_to_text_without_its_key_is_a_problem_with_the_fix(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.config_path.write_text("stt:\n  provider: openai\n  api_key_env: WHISPER_KEY\n")
    result = herald("doctor", "--offline")
    assert result.returncode == 1
    assert "[FAIL] keys: stt.provider is openai but WHISPER_KEY is not set" in result.stdout
    monkeypatch.setenv("WHISPER_KEY", "secret-value")
    result = herald("doctor", "--offline")
    assert "[ok]   keys: WHISPER_KEY is set for speech-to-text (whisper-1)." in result.stdout
    assert "secret-value" not in result.stdout


@pytest.mark.own_database  # states of a PostgreSQL of its own
def test_doctor_checks_the_postgresql_it_is_configured_for_without_printing_credentials(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch, postgresql_database: str
) -> None:
    from tests.conftest import postgres_server

    server = postgres_server()
    name = postgresql_database.rsplit("/", 1)[1]
    server.sql(name, "CREATE ROLE bot LOGIN PASSWORD 'sesame'")
    with_password = postgresql_database.replace("herald@", "herald:sesame@")
    monkeypatch.setenv("DB_URL", with_password)
    home.config_path.write_text("storage:\n  url: $DB_URL\n")
    result = herald("doctor", "--offline")
    assert "[ok]   database: postgresql://herald:***@127.0.0.1:" in result.stdout
    assert "answers: PostgreSQL 1" in result.stdout and "has this Herald's schema (revision" in result.stdout
    assert "may create and change Herald's tables" in result.stdout
    assert "sesame" not in result.stdout + result.stderr

    server.sql(name, "GRANT CONNECT ON DATABASE " + name + " TO bot")
    as_bot = postgresql_database.replace("herald@", "bot:sesame@")
    monkeypatch.setenv("DB_URL", as_bot)
    result = herald("doctor", "--offline")
    assert result.returncode == 1, result.stdout
    assert "[FAIL] database: the user of postgresql://bot:***@" in result.stdout, result.stdout
    assert "lacks CREATE in schema public" in result.stdout and "SELECT on " in result.stdout
    assert "sesame" not in result.stdout + result.stderr


async def test_speech_to_text_at_a_server_of_your_own_needs_no_key(home: HeraldHome) -> None:
    stt = {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1"}
    config = HeraldConfig.model_validate({"stt": stt})
    context = DoctorContext(home, {"ANTHROPIC_API_KEY": "k"}, offline=True, config=config)
    findings = [f for f in await check_keys(context) if "speech-to-text" in f.text]
    assert [(f.status, f.text) for f in findings] == [
        ("ok", "speech-to-text at http://127.0.0.1:8000/v1 gets no key (OPENAI_API_KEY is not set).")
    ]


async def test_each_fallback_model_is_checked_for_its_key_and_endpoint(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """A fallback is needed when the main model fails: the worst time to find its key missing or its
    endpoint wrong. Each is checked like the model itself, named by its setting."""
    mini = {"provider": "openai", "api_key_env": "MINI_KEY"}
    fallbacks = [
        {"provider": "anthropic", "name": "claude-haiku-4-5"},  # the model's endpoint and key
        {**mini, "name": "gpt-5-mini", "base_url": f"{emulator_url}/v1"},
        {**mini, "name": "gpt-4o", "base_url": "http://127.0.0.1:9/v1"},  # nothing listens there
        {"provider": "openai", "name": "deepseek-chat", "api_key_env": "DEEPSEEK_KEY"},
    ]
    model: dict[str, object] = {"provider": "anthropic", "name": "claude-sonnet-4-6"}
    model["base_url"] = emulator_url
    model["fallbacks"] = fallbacks
    config = HeraldConfig.model_validate({"model": model})
    environ = {"ANTHROPIC_API_KEY": "test-key", "MINI_KEY": "mini-key"}
    context = DoctorContext(home, environ, offline=False, config=config, timeout=5.0)
    keys = [(f.status, f.text) for f in await check_keys(context)]
    found = [(f.status, f.subject, f.text) for f in await check_provider(context)]
    assert keys == [
        ("ok", "ANTHROPIC_API_KEY is set for anthropic."),
        ("ok", "MINI_KEY is set for fallback gpt-5-mini."),
        (
            "fail",
            "model.fallbacks[3] (deepseek-chat): No API key for openai: set DEEPSEEK_KEY in the environment "
            "or in .env in your Herald home (see `herald setup`).",
        ),
    ]
    assert [(status, subject) for status, subject, _ in found] == [
        ("ok", "provider"),
        ("ok", "fallback claude-haiku-4-5"),
        ("ok", "fallback gpt-5-mini"),
        ("fail", "fallback gpt-4o"),
        ("skip", "fallback deepseek-chat"),
    ]
    assert found[2][2].startswith(f"{emulator_url}/v1 answered the model list (")
    assert found[3][2].startswith("cannot reach http://127.0.0.1:9/v1 (")
    assert "(model.fallbacks[2].base_url or OPENAI_BASE_URL)" in found[3][2]
    assert found[4][2] == "not checked: no API key for openai (DEEPSEEK_KEY)."


async def test_spoken_replies_say_whether_their_speech_service_has_its_key(home: HeraldHome) -> None:
    async def said(tts: dict[str, Any], environ: dict[str, str]) -> list[tuple[str, str]]:
        config = HeraldConfig.model_validate({"tts": tts})
        context = DoctorContext(home, {"ANTHROPIC_API_KEY": "k", **environ}, offline=True, config=config)
        findings = await check_keys(context)
        return [(f.status, f.text) for f in findings if "tts" in f.text or "spoken" in f.text]

    missing = await said({"provider": "openai"}, {})
    assert missing == [("fail", missing[0][1])]
    assert missing[0][1].startswith("tts.provider is openai but OPENAI_API_KEY is not set: put the key in")
    assert await said({"provider": "openai"}, {"OPENAI_API_KEY": "sk"}) == [
        ("ok", "OPENAI_API_KEY is set for spoken replies (tts-1).")
    ]
    assert await said({"provider": "openai", "base_url": "http://127.0.0.1:8880/v1"}, {}) == [
        ("ok", "spoken replies at http://127.0.0.1:8880/v1 get no key (OPENAI_API_KEY is not set).")
    ]
    assert await said({"provider": "edge"}, {}) == []  # Edge needs no key
    assert await said({"provider": "openai", "mode": "off"}, {}) == []  # nothing is spoken


async def web_search_report(
    home: HeraldHome, search: dict, environ: dict[str, str], offline: bool = False
) -> str:
    """What `herald doctor` prints about web search for ``search`` (the web.search section)."""
    home.config_path.write_text(yaml.safe_dump({"web": {"search": search}}))
    out = io.StringIO()
    await run_doctor(home, offline=offline, out=out, checks=[check_config, check_web_search], environ=environ)
    lines = out.getvalue().splitlines(keepends=True)
    return "".join(line for line in lines if line.startswith("[") and " web search: " in line)


async def test_web_search_without_its_key_or_url_is_a_failure_that_says_what_to_set(
    home: HeraldHome,
) -> None:
    """Before, a missing key only left web_search out of new sessions, with a line in the gateway's log."""
    brave = await web_search_report(home, {"provider": "brave"}, {})
    searxng = await web_search_report(home, {"provider": "searxng"}, {})
    off = await web_search_report(home, {}, {})
    assert brave == (
        "[FAIL] web search: web.search.provider is brave but BRAVE_API_KEY is not set, so sessions get no "
        f"web_search; put BRAVE_API_KEY in the environment or in {home.env_path}.\n"
    )
    assert searxng == (
        "[FAIL] web search: web.search.provider is searxng but web.search.searxng_url is not set, so "
        "sessions get no web_search; set web.search.searxng_url to your SearXNG's address.\n"
    )
    assert off == "[skip] web search: not enabled (web.search.provider is not set).\n"


async def test_web_search_is_checked_with_one_search_and_a_refused_key_is_named_never_shown(
    home: HeraldHome, fake_web: FakeWeb
) -> None:
    brave = {"provider": "brave", "brave_url": f"{fake_web.url}/brave"}
    tavily = {"provider": "tavily", "tavily_url": f"{fake_web.url}/tavily"}
    assert await web_search_report(home, brave, {"BRAVE_API_KEY": BRAVE_KEY}) == (
        "[ok]   web search: Brave Search answered a test search.\n"
    )
    assert await web_search_report(home, tavily, {"TAVILY_API_KEY": TAVILY_KEY}) == (
        "[ok]   web search: Tavily answered a test search.\n"
    )
    [request] = [r for r in fake_web.requests if r.path == "/brave"]
    assert request.query["count"] == "1"
    refused = await web_search_report(home, brave, {"BRAVE_API_KEY": "a-wrong-key"})
    assert refused == (
        "[FAIL] web search: Brave Search answered 401 Unauthorized (check the API key in BRAVE_API_KEY).\n"
    )
    fake_web.searxng_json = False
    searxng = {"provider": "searxng", "searxng_url": f"{fake_web.url}/searxng"}
    assert "is the json format enabled under search.formats" in await web_search_report(home, searxng, {})
    before = len(fake_web.requests)
    offline = await web_search_report(home, brave, {"BRAVE_API_KEY": BRAVE_KEY}, offline=True)
    assert offline == "[skip] web search: brave is set up; not checked (--offline).\n"
    assert len(fake_web.requests) == before
