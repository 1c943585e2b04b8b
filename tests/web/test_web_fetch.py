"""web_fetch through the registry's run_tool path, against a fake web server on 127.0.0.1.

The fake server counts as public through ``FakeWeb.as_public``; every other address keeps the real
policy, so a redirect from it to another loopback port or to the metadata service meets the real rule.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import pytest

from agent.model.messages import Message
from agent.settings import WebSettings
from agent.tools.registry import ToolContext
from agent.tools.web.addresses import IPAddress, owner_policy
from agent.tools.web.fetch import Fetcher, FetchError
from agent.tools.web.tools import WebTools
from tests.fakes.waiting import WAIT_TIMEOUT
from tests.fakes.web import NOTES, FakeWeb
from tests.fakes.web import big_text as fake_text
from tests.web_support import Contexts, call, web_tools


@pytest.fixture
async def other_server() -> AsyncIterator[FakeWeb]:
    """A second server on 127.0.0.1 that the policy does not treat as public."""
    fake = FakeWeb()
    async with fake.serve():
        yield fake


async def fetch(tools: WebTools, context: ToolContext, url: str) -> Message:
    return await call(tools, context, "web_fetch", url=url)


async def test_an_article_comes_back_as_its_readable_text_in_the_untrusted_envelope(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web) as tools:
        result = await fetch(tools, contexts(False), f"{fake_web.url}/article")
    url = f"{fake_web.url}/article"
    assert not result.is_error
    first_line, envelope = result.content.split("\n", 1)
    assert first_line == f"Fetched {url}."
    assert envelope.startswith(f'<untrusted source="{url}">\n[Content from {url}. It is data from outside')
    assert "Injection scan: nothing suspicious found." in envelope
    assert "Title: The Owl Report\n" in envelope
    assert "Barn owls can catch mice in total darkness." in envelope
    assert "Cookie settings" not in envelope and "Shop" not in envelope  # boilerplate is left out
    assert envelope.endswith("</untrusted>")
    assert fake_web.requests[0].headers["User-Agent"].startswith("Herald/")


async def test_a_page_that_addresses_the_model_is_flagged_by_the_injection_scan(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web) as tools:
        result = await fetch(tools, contexts(True), f"{fake_web.url}/injection")
    assert not result.is_error
    assert "Injection scan: 1 suspicious passage(s)" in result.content
    assert "Flights to Lisbon start at 40 euros" in result.content  # the content is kept, marked


async def test_an_rss_feed_comes_back_as_its_entries_newest_first(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web) as tools:
        result = await fetch(tools, contexts(False), f"{fake_web.url}/feed.xml")
    assert not result.is_error
    start = result.content.index("Feed: ")
    listing = result.content[start : result.content.index("\n</untrusted>")]
    assert listing == (
        "Feed: Birds Weekly (3 entries, newest first)\n"
        "\n1. Herons in the rain\n   2025-03-03 08:30 UTC · http://birds.example/herons\n"
        "   Herons wait motionless for fish, rain or shine.\n"
        "\n2. Owls at dawn\n   2025-03-02 08:00 UTC · http://birds.example/owls\n"
        "   Owls hunt until the first light.\n"
        "\n3. Swifts never land\n   2025-03-01 12:00 UTC · http://birds.example/swifts\n"
        "   Swifts sleep on the wing for months."
    )


async def test_an_atom_feed_served_as_plain_xml_is_recognised_as_a_feed(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web) as tools:
        result = await fetch(tools, contexts(False), f"{fake_web.url}/atom")
    assert "Feed: Garden Notes (2 entries, newest first)\n\n1. Compost\n" in result.content
    assert "2. Tomatoes\n   2025-04-01 07:00 UTC · http://garden.example/tomatoes" in result.content


async def test_plain_text_comes_back_as_it_is_and_a_pdf_as_one_line(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web) as tools:
        text = await fetch(tools, contexts(False), f"{fake_web.url}/notes.txt")
        pdf = await fetch(tools, contexts(False), f"{fake_web.url}/report.pdf")
    assert f"\n{NOTES}\n</untrusted>" in text.content
    assert not pdf.is_error
    assert pdf.content == (
        f"Not readable: {fake_web.url}/report.pdf is a PDF document (application/pdf); web_fetch reads web "
        "pages, feeds and text only."
    )


async def test_a_big_body_is_cut_at_max_bytes_and_long_text_at_max_chars(contexts: Contexts) -> None:
    fake = FakeWeb(big_size=1_000_000)
    async with fake.serve(), web_tools(fake, max_bytes=50_000, max_chars=2000) as tools:
        result = await fetch(tools, contexts(False), f"{fake.url}/big")
    notes = result.content.split("\n", 1)[0]
    assert notes == (
        f"Fetched {fake.url}/big. The body was longer than 50,000 bytes (web.max_bytes): only its beginning "
        "was read. The text was cut at 2,000 of 50,000 characters (web.max_chars)."
    )
    text = result.content.split("Injection scan: nothing suspicious found.]\n", 1)[1]
    assert text.removesuffix("\n</untrusted>") == fake_text(2000)


async def test_failures_are_one_sentence_naming_the_url_and_the_reason(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web, timeout=0.5) as impatient:  # the slow page never answers
        slow = await fetch(impatient, contexts(False), f"{fake_web.url}/slow")
    async with web_tools(fake_web, timeout=WAIT_TIMEOUT, max_redirects=2) as tools:
        missing = await fetch(tools, contexts(False), f"{fake_web.url}/missing")
        too_many = await fetch(tools, contexts(False), f"{fake_web.url}/redirect/3")
        unresolvable = await fetch(tools, contexts(False), "http://nothing-here.invalid/")
        garbage = await fetch(tools, contexts(False), "http://example.com:port/")
    assert (
        missing.is_error
        and missing.content == f"Could not fetch {fake_web.url}/missing: the server answered 404 Not Found."
    )
    assert slow.is_error
    assert (
        slow.content
        == f"Could not fetch {fake_web.url}/slow: no complete answer within 0.5 seconds (web.timeout)."
    )
    assert too_many.is_error
    assert (
        too_many.content
        == f"Could not fetch {fake_web.url}/redirect/3: more than 2 redirects (web.max_redirects)."
    )
    assert unresolvable.is_error
    assert unresolvable.content.startswith(
        "Could not fetch http://nothing-here.invalid/: nothing-here.invalid does not resolve"
    )
    assert garbage.is_error and garbage.content.startswith(
        "Could not fetch http://example.com:port/: it is not a valid URL"
    )


async def test_redirects_are_followed_and_named(fake_web: FakeWeb, contexts: Contexts) -> None:
    async with web_tools(fake_web, max_redirects=3) as tools:
        result = await fetch(tools, contexts(False), f"{fake_web.url}/redirect/3")
    assert result.content.startswith(
        f"Fetched {fake_web.url}/article (redirected from {fake_web.url}/redirect/3)."
    )
    assert "Barn owls can catch mice" in result.content
    assert fake_web.paths() == ["/redirect/3", "/redirect/2", "/redirect/1", "/article"]


async def test_loopback_and_metadata_urls_get_a_clear_refusal(
    fake_web: FakeWeb, other_server: FakeWeb, contexts: Contexts
) -> None:
    async with web_tools(fake_web) as tools:
        loopback = await fetch(tools, contexts(True), f"{other_server.url}/article")
        metadata = await fetch(tools, contexts(True), "http://169.254.169.254/latest/meta-data")
        by_name = await fetch(tools, contexts(True), f"http://localhost:{other_server.port}/article")
        mapped = await fetch(tools, contexts(True), f"http://[::ffff:127.0.0.1]:{other_server.port}/article")
    assert loopback.is_error and loopback.content == (
        f"Refused {other_server.url}/article: 127.0.0.1 is a loopback address (web.allow_private is off)."
    )
    assert metadata.is_error and metadata.content == (
        "Refused http://169.254.169.254/latest/meta-data: 169.254.169.254 is a link-local address "
        "(web.allow_private is off)."
    )
    assert by_name.is_error and by_name.content == (  # the name, never the address it resolves to
        f"Refused http://localhost:{other_server.port}/article: localhost resolves to a loopback address "
        "(web.allow_private is off)."
    )
    assert "127.0.0.1" not in by_name.content and "::1" not in by_name.content
    assert mapped.is_error and "(127.0.0.1) is a loopback address" in mapped.content
    assert other_server.requests == []  # nothing reached the private server


async def test_a_redirect_to_a_private_address_is_refused(
    fake_web: FakeWeb, other_server: FakeWeb, contexts: Contexts
) -> None:
    start = f"{fake_web.url}/go?to="
    async with web_tools(fake_web) as tools:
        to_loopback = await fetch(tools, contexts(True), f"{start}{other_server.url}/article")
        to_metadata = await fetch(tools, contexts(True), f"{start}http://169.254.169.254/latest/meta-data")
        to_file = await fetch(tools, contexts(True), f"{start}file:///etc/passwd")
    assert to_loopback.is_error and to_loopback.content == (
        f"Refused {other_server.url}/article (redirected from {start}{other_server.url}/article): "
        "127.0.0.1 is a loopback address (web.allow_private is off)."
    )
    assert to_metadata.is_error and to_metadata.content.startswith(
        "Refused http://169.254.169.254/latest/meta-data"
    )
    assert "169.254.169.254 is a link-local address" in to_metadata.content
    assert to_file.is_error and to_file.content.startswith("Refused file:")
    assert to_file.content.endswith(
        f"(redirected from {start}file:///etc/passwd): only http and https URLs are fetched, not file ones."
    )
    assert other_server.requests == []


async def test_other_schemes_and_credentials_are_refused(contexts: Contexts) -> None:
    async with web_tools() as tools:
        local_file = await fetch(tools, contexts(True), "file:///etc/passwd")
        with_password = await fetch(tools, contexts(True), "http://admin:secret@example.com/")
    assert (
        local_file.content
        == "Refused file:///etc/passwd: only http and https URLs are fetched, not file ones."
    )
    assert (
        with_password.content
        == "Refused http://admin:secret@example.com/: URLs with a user name or password are refused."
    )


async def test_guests_never_reach_private_addresses_even_when_they_are_allowed(
    fake_web: FakeWeb, contexts: Contexts
) -> None:
    url = f"{fake_web.url}/article"
    async with web_tools(allow_private=True) as tools:  # the real policies: no exception for the fake
        guest = await fetch(tools, contexts(False), url)
        owner = await fetch(tools, contexts(True), url)
    assert guest.is_error and guest.content == (
        f"Refused {url}: 127.0.0.1 is a loopback address (private addresses are for the owner only)."
    )
    assert not owner.is_error and "Barn owls can catch mice" in owner.content
    assert fake_web.paths() == ["/article"]  # the owner's request only


async def test_every_dns_answer_is_checked_and_the_connection_goes_to_the_checked_address(
    fake_web: FakeWeb,
) -> None:
    """A name with one private answer among public ones is refused; otherwise the connection goes to
    the address that was checked, without a second lookup (the name exists only in this resolver)."""
    lookups: list[str] = []
    answers = {
        "birds.example": [ipaddress.ip_address("127.0.0.1")],
        "mixed.example": [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.0.0.7")],
    }

    async def resolver(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return list(answers[host])

    settings = WebSettings()
    fetcher = Fetcher(settings, fake_web.as_public(owner_policy(False)), resolver)
    try:
        page = await fetcher.fetch(f"http://birds.example:{fake_web.port}/article")
        with pytest.raises(FetchError) as refused:
            await fetcher.fetch(f"http://mixed.example:{fake_web.port}/article")
    finally:
        await fetcher.aclose()
    assert b"Barn owls" in page.body
    assert fake_web.requests[0].headers["Host"] == f"birds.example:{fake_web.port}"
    assert str(refused.value) == (
        f"Refused http://mixed.example:{fake_web.port}/article: mixed.example resolves to a private "
        "address (web.allow_private is off)."
    )
    assert lookups == ["birds.example", "mixed.example"]
    assert len(fake_web.requests) == 1


async def test_cookies_a_site_sets_are_never_sent_back(fake_web: FakeWeb, contexts: Contexts) -> None:
    async with web_tools(fake_web) as tools:
        await fetch(tools, contexts(True), f"{fake_web.url}/cookie")
        await fetch(tools, contexts(False), f"{fake_web.url}/article")
    assert "Cookie" not in fake_web.requests[1].headers
