"""Console logins: signed session cookies, CSRF tokens and the token check, all compared in constant time.

A login is a cookie the browser sends back, ``v1.<expires>.<nonce>.<signature>``: the signature is an
HMAC-SHA256 with a key only the gateway knows, so the cookie cannot be forged or prolonged, and any
process of a cluster checks it without asking the others. The key is derived from a random secret kept
in the database (made once, shared by every process) and from ``HERALD_CONSOLE_TOKEN``: changing the
token logs every browser out. With ``bots:`` a login made by a bot's link is that bot's only: the nonce
ends in ``~NAME`` (signed with the rest, so it cannot be widened). Each login's CSRF token is an HMAC of
its nonce, so a form posted from another site (which cannot read the page) carries no valid one. The
login form itself has a CSRF token too, bound to a short-lived cookie of its own (a login CSRF would log
a victim into an attacker's session).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "herald_console"
LOGIN_COOKIE = "herald_console_login"
VERSION = "v1"
LOGIN_VERSION = "l1"
LOGIN_FORM_SECONDS = 3600.0  # a login form may be sent within an hour of being shown
MIN_TOKEN_CHARS = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def derive_key(secret: bytes, token: str | None) -> bytes:
    """The signing key of cookies and CSRF tokens: from the database's secret and the console token."""
    return hmac.new(secret, b"herald-console\0" + (token or "").encode(), hashlib.sha256).digest()


def same(given: str, expected: str) -> bool:
    """``given == expected`` in constant time, whatever their lengths (both are hashed first)."""
    return hmac.compare_digest(
        hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest(),
        hashlib.sha256(expected.encode("utf-8", "surrogatepass")).digest(),
    )


BOT_MARK = "~"  # nonce~NAME: a login for bot NAME only (neither base64url nor a bot name has it)


@dataclass(frozen=True)
class Login:
    """A verified session cookie."""

    nonce: str
    expires_at: float

    @property
    def bot(self) -> str | None:
        """The one bot this login may see (a bot's link, with ``bots:``); None: every bot."""
        return self.nonce.partition(BOT_MARK)[2] or None

    def sees(self, bot: str | None) -> bool:
        return self.bot is None or self.bot == bot


class Signer:
    """Signs and checks the console's cookies and tokens with one key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, purpose: str, text: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}\0{text}".encode(), hashlib.sha256).digest())

    def _signed(self, version: str, expires_at: float, nonce: str) -> str:
        body = f"{version}.{int(expires_at)}.{nonce}"
        return f"{body}.{self._mac('cookie', body)}"

    def _opened(self, version: str, value: str, now: float) -> Login | None:
        parts = value.split(".")
        if len(parts) != 4 or parts[0] != version or not parts[1].isdigit():
            return None
        body = ".".join(parts[:3])
        if not hmac.compare_digest(parts[3].encode(), self._mac("cookie", body).encode()):
            return None
        expires_at = float(parts[1])
        return Login(parts[2], expires_at) if now < expires_at else None

    def new_login(self, now: float, seconds: float, bot: str | None = None) -> str:
        """A session cookie's value, valid ``seconds`` from ``now`` (for bot ``bot`` only, when given)."""
        nonce = secrets.token_urlsafe(18) + (f"{BOT_MARK}{bot}" if bot else "")
        return self._signed(VERSION, now + seconds, nonce)

    def login(self, cookie: str | None, now: float) -> Login | None:
        """The login a session cookie proves; None for a missing, forged or expired one."""
        return self._opened(VERSION, cookie, now) if cookie else None

    def new_login_form(self, now: float) -> str:
        """The login form's cookie value (it carries the nonce the form's CSRF token is bound to)."""
        return self._signed(LOGIN_VERSION, now + LOGIN_FORM_SECONDS, secrets.token_urlsafe(18))

    def login_form(self, cookie: str | None, now: float) -> Login | None:
        return self._opened(LOGIN_VERSION, cookie, now) if cookie else None

    def csrf(self, nonce: str) -> str:
        """The CSRF token of the forms of the login (or login form) ``nonce``."""
        return self._mac("csrf", nonce)

    def csrf_ok(self, nonce: str, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf(nonce).encode())


def weak_token(token: str) -> str | None:
    """Why ``token`` is too weak to guard the console, or None when it will do."""
    if len(token) < MIN_TOKEN_CHARS:
        return (
            f"HERALD_CONSOLE_TOKEN has {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. the output of: python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    return None
