"""Fetching one URL for ``web_fetch``: redirects followed by hand, a size cap, one deadline.

Redirects are followed here, not by httpx, so every hop is checked like the first URL (scheme, no
credentials) before the connection guard (:mod:`agent.tools.web.guard`) checks where it leads. The
body is streamed and cut at ``web.max_bytes``, so a huge or endless answer costs at most that much
memory, and ``web.timeout`` bounds the whole fetch, redirects and DNS included. Cookies are never
kept: one fetch must not carry what another site (or another person's fetch) was given.

Every failure is a :class:`FetchError` whose message is one sentence naming the URL and the reason,
for the model to act on.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

from agent.settings import WebSettings
from agent.tools.registry import ToolError
from agent.tools.web.addresses import AddressPolicy
from agent.tools.web.guard import AddressRefused, GuardedBackend, GuardedTransport, Resolver, system_resolver

_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}")
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
SCHEMES = ("http", "https")
ACCEPT = (
    "text/html,application/xhtml+xml,application/rss+xml,application/atom+xml,application/xml;q=0.9,"
    "text/plain;q=0.8,*/*;q=0.5"
)


class FetchError(ToolError):
    """A fetch failed; the message is one sentence naming the URL and the reason."""


@dataclass(frozen=True)
class Fetched:
    """A successful answer: where it came from in the end, what it says it is, the (maybe cut) body."""

    url: str  # after redirects
    requested: str  # what was asked for
    redirects: int  # how many were followed
    media_type: str  # lower case, no parameters; "" when the server sent none
    charset: str | None
    body: bytes
    cut: bool  # the body was longer than max_bytes and only its beginning was read


def url_problem(url: httpx.URL) -> str | None:
    """Why ``url`` is never fetched (scheme, credentials, no host), or None."""
    if url.scheme not in SCHEMES:
        return f"only http and https URLs are fetched, not {url.scheme or 'scheme-less'} ones"
    if url.userinfo:
        return "URLs with a user name or password are refused"
    if not url.host:
        return "the URL has no host"
    return None


def parse_url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text.strip())
    except httpx.InvalidURL as error:
        raise FetchError(f"Could not fetch {text}: it is not a valid URL ({error}).") from None
    problem = url_problem(url)
    if problem is not None:
        raise FetchError(f"Refused {text}: {problem}.")
    return url


def content_type(header: str) -> tuple[str, str | None]:
    """The media type (lower case; "" unless it is a well-formed type/subtype) and charset of a
    Content-Type header. The media type may be shown to the model outside the untrusted envelope."""
    media, *params = header.split(";")
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"').lower()
    media = media.strip().lower()
    return (media if _MEDIA_TYPE.fullmatch(media) else ""), charset


async def read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the (decoded) body, and whether there was more."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def no_cookies() -> CookieJar:
    """A cookie jar that keeps nothing (no domain is allowed to set a cookie)."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class Fetcher:
    """Fetches URLs over one connection pool whose every connection ``policy`` allowed.

    Owner and guests get separate fetchers (separate pools), so a connection opened for the owner to a
    private address is never reused for a guest.
    """

    def __init__(
        self, settings: WebSettings, policy: AddressPolicy, resolver: Resolver = system_resolver
    ) -> None:
        self.settings = settings
        self._client = httpx.AsyncClient(
            transport=GuardedTransport(GuardedBackend(policy, resolver)),
            timeout=httpx.Timeout(settings.timeout),
            headers={"User-Agent": settings.user_agent, "Accept": ACCEPT},
            cookies=no_cookies(),
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the guard must see the real destination
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(self, text: str) -> Fetched:
        """GET ``text``, following at most ``max_redirects`` redirects, all within ``timeout``."""
        url = parse_url(text)
        try:
            async with asyncio.timeout(self.settings.timeout):
                return await self._follow(text, url)
        except TimeoutError:
            raise FetchError(
                f"Could not fetch {text}: no complete answer within {self.settings.timeout:g} seconds "
                "(web.timeout)."
            ) from None

    async def _follow(self, requested: str, url: httpx.URL) -> Fetched:
        for hop in range(self.settings.max_redirects + 1):
            named = requested if hop == 0 else f"{url} (redirected from {requested})"
            try:
                async with self._client.stream("GET", url) as response:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        url = self._next_hop(requested, named, response.url, location)
                        continue
                    if response.status_code >= 400:
                        raise FetchError(
                            f"Could not fetch {named}: the server answered {response.status_code} "
                            f"{response.reason_phrase}."
                        )
                    body, cut = await read_capped(response, self.settings.max_bytes)
                    media, charset = content_type(response.headers.get("content-type", ""))
                    return Fetched(str(response.url), requested, hop, media, charset, body, cut)
            except AddressRefused as refused:
                raise FetchError(f"Refused {named}: {refused}.") from None
            except httpx.TimeoutException:
                raise TimeoutError from None  # reported by fetch() as the deadline it is
            except httpx.HTTPError as error:
                raise FetchError(f"Could not fetch {named}: {error_text(error)}.") from None
        raise FetchError(
            f"Could not fetch {requested}: more than {self.settings.max_redirects} redirects "
            "(web.max_redirects)."
        )

    def _next_hop(self, requested: str, named: str, current: httpx.URL, location: str) -> httpx.URL:
        try:
            target = current.join(location)
        except httpx.InvalidURL:
            raise FetchError(f"Could not fetch {named}: it redirects to an invalid URL.") from None
        problem = url_problem(target)
        if problem is not None:
            raise FetchError(f"Refused {target} (redirected from {requested}): {problem}.")
        return target


def error_text(error: httpx.HTTPError) -> str:
    """A short reason for a transport failure (httpx's message, or the error's kind when it has none)."""
    text = str(error).strip().rstrip(".")
    return text or type(error).__name__
