"""``herald doctor``'s provider check: is the configured endpoint the provider's API, and does it take
the key?

Any server answers something, so "it answered" proves nothing: a wrong ``base_url`` answers 404, a web
site answers an HTML page with 200. The check asks for what only the API gives: the model list
(``GET /v1/models``, which Anthropic, OpenAI and nearly every compatible server have); a server without
one (404) is sent a one-token request to the configured model instead (a few tokens' cost). Every
outcome is one sentence that says what to fix. Judging an answer is pure (:func:`judge_model_list`,
:func:`judge_request`); :func:`probe` only asks.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from agent.api import ProviderKey, error_message, missing_v1_hint, redact
from gateway.doctor.findings import DoctorContext, Finding
from gateway.wiring.providers import configured_base_url, fallback_keys, key_variable

BASE_URL_VARIABLES = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}
API_NAMES = {"anthropic": "Anthropic", "openai": "OpenAI-compatible"}
ANSWER_FIELDS = {"anthropic": "content", "openai": "choices"}  # what a real answer to a request holds
MAX_DETAIL = 160  # characters of a server's own error message quoted in a finding


@dataclass(frozen=True)
class Endpoint:
    """What is checked: the provider's API at ``url`` (as the SDK resolved it), for ``model``, configured
    under ``setting`` (``model``, or a fallback's ``model.fallbacks[N]``)."""

    provider: str  # anthropic | openai
    model: str
    key_variable: str
    url: str
    setting: str = "model"

    @property
    def api(self) -> str:
        return API_NAMES[self.provider]

    @property
    def where(self) -> str:
        """Where the endpoint is set, for a fix."""
        return f"{self.setting}.base_url or {BASE_URL_VARIABLES[self.provider]}"


@dataclass(frozen=True)
class Answer:
    """What one request came back with: an HTTP answer, or why there was none."""

    status: int | None = None  # None: no answer (see ``failure``)
    content_type: str = ""
    body: Any = None  # the parsed JSON; None when the body was not JSON
    failure: Literal["timeout", "unreachable"] | None = None
    detail: str = ""  # why there was no answer, in the transport's words

    @property
    def html(self) -> bool:
        return "html" in self.content_type

    @property
    def message(self) -> str:
        """The server's own error message, on one line and short; "" when it gave none."""
        text = " ".join(error_message(self.body, "").split())
        return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def _quoted(answer: Answer) -> str:
    return f": {answer.message}" if answer.message else ""


def _no_answer(endpoint: Endpoint, answer: Answer, seconds: float) -> Finding | None:
    offline = "or run `herald doctor --offline` where no network is expected"
    if answer.failure == "timeout":
        text = (
            f"{endpoint.url} did not answer within {seconds:g} s; check the endpoint ({endpoint.where}) "
            f"and the network, {offline}."
        )
        return Finding("fail", "provider", text)
    if answer.failure == "unreachable":
        text = (
            f"cannot reach {endpoint.url} ({answer.detail}); check the network and the endpoint "
            f"({endpoint.where}), {offline}."
        )
        return Finding("fail", "provider", text)
    return None


def _refused_or_busy(endpoint: Endpoint, answer: Answer) -> Finding | None:
    status = answer.status or 0
    if status in (401, 403):
        text = (
            f"{endpoint.url} refused the API key (HTTP {status}{_quoted(answer)}); "
            f"check {endpoint.key_variable}."
        )
        return Finding("fail", "provider", text)
    if status == 429 or status >= 500:
        text = f"{endpoint.url} is reachable but answered HTTP {status}: it may be busy; try again later."
        return Finding("warn", "provider", text)
    return None


def _not_the_api(endpoint: Endpoint, answer: Answer, asked: str) -> Finding:
    """A server that answered ``asked`` with something the API never sends."""
    if answer.html:
        text = (
            f"{endpoint.url} answered {asked} with a web page (HTTP {answer.status}), not the "
            f"{endpoint.api} API; check the endpoint ({endpoint.where})."
        )
    else:
        kind = "JSON" if answer.body is not None else (answer.content_type.split(";")[0] or "an empty body")
        text = (
            f"{endpoint.url} answered {asked} with {kind} (HTTP {answer.status}) that is not what the "
            f"{endpoint.api} API answers; check the endpoint ({endpoint.where})."
        )
    return Finding("fail", "provider", text)


def judge_model_list(endpoint: Endpoint, answer: Answer, seconds: float) -> Finding | None:
    """What the model list says; None when the server has none (ask with a request next)."""
    found = _no_answer(endpoint, answer, seconds) or _refused_or_busy(endpoint, answer)
    if found is not None:
        return found
    if answer.status is not None and answer.status < 400:
        models = answer.body.get("data") if isinstance(answer.body, dict) else None
        if answer.status == 200 and isinstance(models, list):
            text = f"{endpoint.url} answered the model list ({len(models)} models)."
            return Finding("ok", "provider", text)
        return _not_the_api(endpoint, answer, "the model list")
    return None  # 404 and the like: no model list here, which proves nothing yet


def judge_request(endpoint: Endpoint, answer: Answer, listed: Answer, seconds: float) -> Finding:
    """What a one-token request to the model says, after the model list answered ``listed``."""
    found = _no_answer(endpoint, answer, seconds) or _refused_or_busy(endpoint, answer)
    if found is not None:
        return found
    request = f"a one-token request to {endpoint.model}"
    if answer.status is not None and answer.status < 400:
        fields = answer.body if isinstance(answer.body, dict) else {}
        if answer.status == 200 and ANSWER_FIELDS[endpoint.provider] in fields:
            text = f"{endpoint.url} has no model list (HTTP {listed.status}), but answered {request}."
            return Finding("ok", "provider", text)
        return _not_the_api(endpoint, answer, request)
    if answer.html:
        return _not_the_api(endpoint, answer, request)
    hint = missing_v1_hint(endpoint.url) if endpoint.provider == "openai" and answer.status == 404 else None
    if hint is not None:
        return Finding("fail", "provider", f"{endpoint.url} answered HTTP 404: {hint}.")
    if answer.status == 404:
        text = (
            f"{endpoint.url} answered HTTP 404 to the model list and to {request}{_quoted(answer)}; "
            f"it is not the {endpoint.api} API or does not know the model: check the endpoint "
            f"({endpoint.where}) and {endpoint.setting}.name."
        )
        return Finding("fail", "provider", text)
    text = (
        f"{endpoint.url} refused {request} (HTTP {answer.status}{_quoted(answer)}); check "
        f"{endpoint.setting}.name and the endpoint ({endpoint.where})."
    )
    return Finding("fail", "provider", text)


async def check_provider(ctx: DoctorContext) -> list[Finding]:
    """The configured provider's endpoint, then each fallback model's, with their keys (skipped offline
    or without a key)."""
    if ctx.offline:
        return [Finding("skip", "provider", "not checked (--offline).")]
    if ctx.config is None:
        return [Finding("skip", "provider", "not checked: config.yaml is invalid (see above).")]
    model = ctx.config.model
    findings = [await _check(ctx, ProviderKey(model.provider, model.name), "model", "provider")]
    for index, fallback in enumerate(fallback_keys(ctx.config)):
        setting = f"model.fallbacks[{index}]"
        findings.append(await _check(ctx, fallback, setting, f"fallback {fallback.model}"))
    return findings


async def _check(ctx: DoctorContext, key: ProviderKey, setting: str, subject: str) -> Finding:
    """One model's endpoint, configured under ``setting``, reported as ``subject``."""
    assert ctx.config is not None
    variable = key.api_key_env or key_variable(ctx.config, key.provider)
    api_key = ctx.environ.get(variable)
    if not api_key:
        return Finding("skip", subject, f"not checked: no API key for {key.provider} ({variable}).")
    base_url = configured_base_url(ctx.config, key)
    base_url = base_url or ctx.environ.get(BASE_URL_VARIABLES[key.provider]) or None
    endpoint = Endpoint(key.provider, key.model, variable, str(base_url), setting)
    return await probe(endpoint, api_key, base_url, ctx.timeout, subject)


async def probe(
    endpoint: Endpoint, api_key: str, base_url: str | None, seconds: float, subject: str = "provider"
) -> Finding:
    """The model list, then (when there is none) a one-token request; each given up after ``seconds``.
    ``endpoint.url`` is replaced by the URL the SDK resolved ``base_url`` (None: its default) to."""
    provider, model = endpoint.provider, endpoint.model
    try:
        sdk, client = sdk_client(provider, api_key, base_url, seconds)
    except Exception as error:  # the SDK parses base_url here (httpx's InvalidURL is no ValueError)
        text = f"{base_url} is not a URL that can be used ({error}); fix the endpoint ({endpoint.where})."
        return Finding("fail", subject, text)
    endpoint = replace(endpoint, url=str(client.base_url).rstrip("/"))
    message = [{"role": "user", "content": "ping"}]

    async def one_token() -> Any:
        if provider == "anthropic":
            return await client.messages.with_raw_response.create(model=model, max_tokens=1, messages=message)
        from agent.api import max_tokens_field

        create = client.chat.completions.with_raw_response.create
        return await create(model=model, messages=message, **{max_tokens_field(model): 1})

    async with client:
        listed = await ask(sdk, client.models.with_raw_response.list)
        found = judge_model_list(endpoint, listed, seconds)
        if found is None:
            found = judge_request(endpoint, await ask(sdk, one_token), listed, seconds)
    return Finding(found.status, subject, redact(found.text, [api_key]))  # a server may echo it


def sdk_client(provider: str, api_key: str, base_url: str | None, seconds: float) -> tuple[Any, Any]:
    """The provider's SDK module and a client of it that neither retries nor waits past ``seconds``."""
    if provider == "anthropic":
        import anthropic  # imported here: an SDK takes about a second to import

        return anthropic, anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=seconds, max_retries=0
        )
    import openai

    return openai, openai.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=seconds, max_retries=0)


async def ask(sdk: Any, call: Callable[[], Awaitable[Any]]) -> Answer:
    """One request through the SDK (``sdk``: the anthropic or openai module), whatever it answers."""
    try:
        raw = await call()
    except sdk.APIStatusError as error:
        return answer_of(error.response)
    except sdk.APITimeoutError:
        return Answer(failure="timeout")
    except sdk.APIConnectionError as error:
        reason = error.__cause__ or error
        return Answer(failure="unreachable", detail=" ".join(str(reason).split()) or type(reason).__name__)
    return answer_of(raw.http_response)


def answer_of(response: Any) -> Answer:
    """An HTTP response (the SDK's transport's) as an :class:`Answer`."""
    try:
        body = json.loads(response.text) if response.text.strip() else None
    except ValueError:  # not JSON (an HTML page, plain text); UnicodeDecodeError is a ValueError too
        body = None
    content_type = response.headers.get("content-type", "")
    return Answer(status=response.status_code, content_type=content_type, body=body)
