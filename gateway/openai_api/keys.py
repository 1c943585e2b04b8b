"""The API's keys: which person a bearer key acts for, checked without keeping the key anywhere.

A key is configured as ``$NAME`` (the key is in the environment or ``.env``) or as its SHA-256; either
way only its digest is held here, and a presented key is hashed and compared with every configured
digest in constant time. A key too short to resist guessing stops the start (like the console's token).
The person a key acts for is ``platform:user_id``: ``api:NAME`` for someone who uses the API only (the
key is their access: ``gateway.access.auth.api_people``), or an existing person (``telegram:12345``),
whose access, memory, limits and rights the key then shares. With ``bots:`` a key also names the bot it
talks to: that person of that bot (each bot's API people are its own, ``HeraldConfig.bot``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.chats import split_person_id
from gateway.config import ApiKey, ConfigError
from gateway.home import HeraldHome, from_environment

MIN_KEY_CHARS = 16


@dataclass(frozen=True)
class Caller:
    """Who a request's key acts for."""

    person: str  # platform:user_id
    label: str  # for logs (never the key)
    bot: str | None = None  # the bot the key talks to (``bots:``); None: the one bot

    @property
    def platform(self) -> str:
        return split_person_id(self.person)[0]

    @property
    def user_id(self) -> str:
        return split_person_id(self.person)[1]


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class KeyRing:
    """The configured keys, as digests."""

    def __init__(self, entries: Sequence[tuple[bytes, Caller]]) -> None:
        self._entries = tuple(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, presented: str) -> Caller | None:
        """The caller ``presented`` is the key of, or None. Every digest is compared (in constant time),
        so how long this takes says nothing about which key came close."""
        given = digest(presented)
        found: Caller | None = None
        for expected, caller in self._entries:
            if hmac.compare_digest(given, expected):
                found = caller
        return found


def key_ring(keys: Sequence[ApiKey], home: HeraldHome, environ: Mapping[str, str]) -> KeyRing:
    """The ring of ``api.keys``; a ConfigError names a ``$NAME`` that is not set or a key too short."""
    entries: list[tuple[bytes, Caller]] = []
    for index, key in enumerate(keys):
        label = key.label if key.bot is None else f"{key.label} (bot {key.bot})"
        caller = Caller(key.person, label, key.bot)
        if key.sha256 is not None:
            entries.append((bytes.fromhex(key.sha256), caller))
            continue
        assert key.key is not None  # the schema gives each key exactly one source
        value = from_environment(key.key, f"api.keys[{index}].key", home, environ).strip()
        if len(value) < MIN_KEY_CHARS:
            raise ConfigError(
                f"api.keys[{index}].key ({key.key}) has {len(value)} characters; use at least "
                f"{MIN_KEY_CHARS} (e.g. the output of: herald api new-key)"
            )
        entries.append((digest(value), caller))
    return KeyRing(entries)
