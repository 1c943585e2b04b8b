"""The SSRF rule as pure functions: which addresses web_fetch may reach, and what a refusal says."""

from __future__ import annotations

import ipaddress

import pytest

from agent.tools.web.addresses import Reach, classify, embedded_ipv4, guest_policy, owner_policy, refusal


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def shown(address: str) -> str:
    """How a refusal names an address: IPv6 ones that lead to IPv4 name that too."""
    parsed = ip(address)
    inner = embedded_ipv4(parsed)
    return f"{parsed} ({inner})" if inner is not None else str(parsed)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "93.184.215.14",
        "2001:4860:4860::8888",
        "::ffff:8.8.8.8",
        "2002:808:808::1",
        "64:ff9b::808:808",
    ],
)
def test_globally_routable_addresses_are_allowed(address: str) -> None:
    assert classify(ip(address)).reach is Reach.PUBLIC
    assert refusal(ip(address), allow_private=False) is None


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "a loopback address"),
        ("127.8.9.10", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("172.16.0.9", "a private address"),
        ("192.168.1.1", "a private address"),
        ("169.254.169.254", "a link-local address"),  # the cloud metadata service
        ("fe80::1", "a link-local address"),
        ("100.64.0.1", "a carrier-grade NAT address"),
        ("fd12:3456::1", "a unique local address"),
        ("fec0::1", "a site-local address"),  # ipaddress calls it global
        ("192.0.2.7", "a private address"),  # documentation range: never a public server
        # IPv6 addresses that lead to an IPv4 one are judged by it
        ("::ffff:127.0.0.1", "a loopback address"),
        ("::ffff:169.254.169.254", "a link-local address"),
        ("::ffff:10.0.0.1", "a private address"),
        ("2002:7f00:1::", "a loopback address"),  # 6to4 of 127.0.0.1, which ipaddress calls global
        ("2002:a9fe:a9fe::", "a link-local address"),  # 6to4 of 169.254.169.254
        ("64:ff9b::a9fe:a9fe", "a link-local address"),  # NAT64 of 169.254.169.254
    ],
)
def test_private_addresses_are_refused_unless_allowed(address: str, kind: str) -> None:
    assert classify(ip(address)).reach is Reach.PRIVATE
    assert refusal(ip(address), allow_private=False) == f"{shown(address)} is {kind}"
    assert refusal(ip(address), allow_private=True) is None


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("224.0.0.1", "a multicast address"),  # ipaddress calls it global
        ("ff02::1", "a multicast address"),
        ("240.0.0.1", "a reserved address"),
        ("255.255.255.255", "a reserved address"),
        ("::127.0.0.1", "a reserved address"),  # IPv4-compatible (deprecated); ipaddress calls it global
    ],
)
def test_addresses_where_no_web_server_lives_are_refused_even_with_private_allowed(
    address: str, kind: str
) -> None:
    assert refusal(ip(address), allow_private=True) == f"{ip(address)} is {kind}"


def test_a_refusal_names_the_setting_and_guests_are_never_allowed_private_addresses() -> None:
    metadata = ip("169.254.169.254")
    assert owner_policy(allow_private=False).refusal(metadata, 80) == (
        "169.254.169.254 is a link-local address (web.allow_private is off)"
    )
    assert owner_policy(allow_private=True).refusal(metadata, 80) is None
    assert guest_policy(allow_private=False).refusal(metadata, 80) == (
        "169.254.169.254 is a link-local address (web.allow_private is off)"
    )
    assert guest_policy(allow_private=True).refusal(metadata, 80) == (
        "169.254.169.254 is a link-local address (private addresses are for the owner only)"
    )
    assert owner_policy(allow_private=True).refusal(ip("0.0.0.0"), 80) == "0.0.0.0 is an unspecified address"
    assert guest_policy(allow_private=True).refusal(ip("1.1.1.1"), 443) is None
    assert owner_policy(allow_private=False).refusal(ip("::ffff:169.254.169.254"), 80) == (
        "::ffff:a9fe:a9fe (169.254.169.254) is a link-local address (web.allow_private is off)"
    )


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.1.2.3", "a private address"),
        ("169.254.169.254", "a link-local address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("fd12:3456::1", "a unique local address"),
        ("224.0.0.1", "a multicast address"),
    ],
)
def test_a_refusal_for_a_host_name_says_what_it_resolves_to_without_the_address(
    address: str, kind: str
) -> None:
    """A guest who asks for http://intranet.example/ must not learn the owner's network map from it."""
    for policy in (owner_policy(allow_private=False), guest_policy(allow_private=True)):
        reason = policy.refusal(ip(address), 80, "intranet.example")
        assert reason is not None and reason.startswith(f"intranet.example resolves to {kind}")
        assert address not in reason and str(ip(address)) not in reason
        assert str(embedded_ipv4(ip(address)) or address) not in reason
