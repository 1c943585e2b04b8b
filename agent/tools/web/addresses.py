"""Which network addresses ``web_fetch`` may connect to (the SSRF rule).

A URL the model was given — by a web page, a feed, a person in a group chat — must not become a way
into the owner's network: the router's admin page, a database on the LAN, the cloud metadata service
at 169.254.169.254 that hands out the machine's credentials. So only globally routable addresses are
allowed unless ``web.allow_private`` is on, and then only for the owner (docs/ARCHITECTURE.md, "Media and
tools"; ``gateway.tools_for_guests``).

Pure functions over :mod:`ipaddress`. Python's ``is_global`` alone is not enough: it calls multicast
and the deprecated IPv6 site-local range global, and it does not look inside IPv6 addresses that
carry an IPv4 address (``::ffff:127.0.0.1``, 6to4 ``2002:7f00:1::``, NAT64 ``64:ff9b::7f00:1``), so
those are unwrapped and judged by the IPv4 address they lead to.

A refusal names an address only when the URL itself held it. For a host name it says what kind of
address the name resolves to, never which one: the model passes the refusal on to whoever asked (a
guest, a group), and "intranet.example resolves to 10.1.2.3" would draw them the owner's network.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

CARRIER_GRADE_NAT = ipaddress.IPv4Network("100.64.0.0/10")
UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class Reach(Enum):
    """Where an address leads."""

    PUBLIC = "public"  # the internet
    PRIVATE = "private"  # this machine or its networks: allowed only with web.allow_private
    UNUSABLE = "unusable"  # no web server is ever there (unspecified, multicast, reserved)


@dataclass(frozen=True)
class Verdict:
    reach: Reach
    kind: str  # what it is, to follow "X is ": "a link-local address"


PUBLIC = Verdict(Reach.PUBLIC, "a public address")


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to (IPv4-mapped, 6to4, NAT64), if it carries one."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def classify(address: IPAddress) -> Verdict:
    """Where ``address`` leads and what to call it."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return classify(inner)
    if address.is_unspecified:
        return Verdict(Reach.UNUSABLE, "an unspecified address")
    if address.is_multicast:
        return Verdict(Reach.UNUSABLE, "a multicast address")
    if address.is_loopback:
        return Verdict(Reach.PRIVATE, "a loopback address")
    if address.is_link_local:
        return Verdict(Reach.PRIVATE, "a link-local address")
    if isinstance(address, ipaddress.IPv4Address) and address in CARRIER_GRADE_NAT:
        return Verdict(Reach.PRIVATE, "a carrier-grade NAT address")
    if isinstance(address, ipaddress.IPv6Address) and address in UNIQUE_LOCAL:
        return Verdict(Reach.PRIVATE, "a unique local address")
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return Verdict(Reach.PRIVATE, "a site-local address")
    if address.is_reserved:
        return Verdict(Reach.UNUSABLE, "a reserved address")
    if address.is_private:
        return Verdict(Reach.PRIVATE, "a private address")
    if not address.is_global:
        return Verdict(Reach.PRIVATE, "an address that is not public")
    return PUBLIC


def refusal(address: IPAddress, *, allow_private: bool, host: str | None = None) -> str | None:
    """Why a connection to ``address`` is refused ("169.254.169.254 is a link-local address"), or None.
    ``host``: the name ``address`` was resolved from, named instead of the address ("intranet.example
    resolves to a private address")."""
    verdict = classify(address)
    if verdict.reach is Reach.PUBLIC or (verdict.reach is Reach.PRIVATE and allow_private):
        return None
    if host is not None:
        return f"{host} resolves to {verdict.kind}"
    inner = embedded_ipv4(address)
    shown = f"{address} ({inner})" if inner is not None else str(address)
    return f"{shown} is {verdict.kind}"


class AddressPolicy(Protocol):
    """Decides each connection ``web_fetch`` is about to open (after DNS, before connecting)."""

    def refusal(self, address: IPAddress, port: int, host: str | None = None) -> str | None:
        """Why ``address``:``port`` is refused, as a sentence ending that names the setting, or None;
        ``host``: the name ``address`` was resolved from (the refusal names it, not the address)."""
        ...


@dataclass(frozen=True)
class NetworkPolicy:
    """The production policy: public addresses only, unless ``allow_private``; ``why_private`` says in
    a refusal why a private address is refused (which setting, or that the caller is a guest)."""

    allow_private: bool
    why_private: str = "web.allow_private is off"

    def refusal(self, address: IPAddress, port: int, host: str | None = None) -> str | None:
        reason = refusal(address, allow_private=self.allow_private, host=host)
        if reason is None:
            return None
        if classify(address).reach is Reach.PRIVATE:
            return f"{reason} ({self.why_private})"
        return reason


def guest_policy(allow_private: bool) -> NetworkPolicy:
    """What guests (groups, people other than the owner) get: never a private address."""
    why = "private addresses are for the owner only" if allow_private else "web.allow_private is off"
    return NetworkPolicy(allow_private=False, why_private=why)


def owner_policy(allow_private: bool) -> NetworkPolicy:
    """What the owner's sessions get: private addresses when ``web.allow_private`` is on."""
    return NetworkPolicy(allow_private=allow_private)
