"""Small records an adapter keeps across restarts and processes, and the seam to whoever keeps them.

Most of what an adapter hears is a message, and the gateway's inbox keeps those. Some platforms need
an adapter to remember more: Discord's slash commands are answered through a token that lives 15
minutes, so the adapter records each one it deferred, and the answer reaches it after a restart or
from another process of a cluster. A sync token, a cursor to catch up from, the question a button
belongs to are the same kind of thing. An adapter keeps such facts in a :class:`RecordStore`: JSON
objects under keys of its own choosing, in a namespace of its own (its platform's name).

Whoever composes the adapter hands it a store: the gateway gives every platform whose spec asks for one
(``PlatformSpec.records``) a store in its database (``gateway.platforms.records``), shared by the
processes of a cluster; an adapter running on its own (tests, a benchmark) uses
:class:`MemoryRecordStore`. ``tests/platforms/test_adapter_records.py`` holds both to this contract.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

JsonObject = Mapping[str, Any]
"""A record's value: a JSON object (text, numbers, booleans, null, lists and objects of them)."""


@dataclass(frozen=True)
class RecordsPolicy:
    """What a platform's spec asks of the store it gets: how long a record is kept after it expired
    (an answer that comes later than a token still finds what it needs to know)."""

    keep_after_expiry: float  # seconds


@dataclass(frozen=True)
class StoredRecord:
    """One record, with the records that belong to it (added with it as their ``parent``)."""

    key: str
    value: JsonObject
    expires_at: float | None  # wall clock (``time.time()``); None: it does not expire
    children: Mapping[str, JsonObject] = field(default_factory=dict)  # key -> value


class RecordStore(ABC):
    """Where an adapter's records live.

    What a caller may assume:

    - **One operation each.** A method happened or, when it raised, it did not. It raises
      ``resilience.unreachable.Unreachable`` when the store cannot be reached now (the gateway's
      database is away: try again later), ``ValueError`` for a value that is not a JSON object.
    - **Reads see writes.** :meth:`get` sees every write that returned before it, in any process.
    - **Idempotent adds.** :meth:`add` keeps the record already under ``key`` (in any process): adding
      the same fact twice, or two processes racing to add it, leaves one record. :meth:`put` replaces.
    - **Children live with their parent.** A record added with ``parent`` is listed in its parent's
      :attr:`StoredRecord.children`, is also found by its own key (with no ``expires_at``: its parent's
      counts), and is dropped with its parent. A child whose parent is missing is not added.
    - **Expiry only moves earlier.** :meth:`expire` never makes a record live longer; retrying it, or
      racing another process's, is harmless.
    - **Kept past expiry, then dropped.** A record is kept ``RecordsPolicy.keep_after_expiry`` seconds
      after its ``expires_at`` (never dropped sooner), then dropped with its children; a record without
      ``expires_at`` stays until :meth:`delete`.

    Keys are the adapter's own (``interaction:123``); another adapter's records are out of reach.
    """

    @abstractmethod
    async def add(
        self, key: str, value: JsonObject, *, expires_at: float | None = None, parent: str | None = None
    ) -> None:
        """Keep ``value`` under ``key`` unless a record is already there (then nothing changes)."""

    @abstractmethod
    async def put(self, key: str, value: JsonObject, *, expires_at: float | None = None) -> None:
        """Keep ``value`` under ``key``, replacing what was there (its children stay)."""

    @abstractmethod
    async def get(self, key: str) -> StoredRecord | None:
        """The record under ``key`` with its children, or None."""

    @abstractmethod
    async def expire(self, key: str, at: float) -> None:
        """The record expires at ``at`` if that is earlier than its ``expires_at`` (else nothing changes)."""

    @abstractmethod
    async def delete(self, key: str) -> None:
        """Drop the record and its children (a missing one counts as dropped)."""


def checked(value: JsonObject) -> JsonObject:
    """``value`` as a plain JSON object (a copy), or ValueError saying what is wrong with it."""
    if not isinstance(value, Mapping):
        raise ValueError(f"a record is a JSON object, not {type(value).__name__}")
    try:
        copy: JsonObject = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ValueError(f"a record must be JSON: {error}") from None
    return copy


LIMIT = 10_000  # records a MemoryRecordStore holds (the oldest forgotten first)


class MemoryRecordStore(RecordStore):
    """Records in this process's memory: for an adapter that runs without the gateway. Bounded: past
    ``limit`` records the oldest are forgotten first (with their children)."""

    def __init__(
        self, policy: RecordsPolicy, *, limit: int = LIMIT, clock: Callable[[], float] = time.time
    ) -> None:
        self._keep = policy.keep_after_expiry
        self._limit = limit
        self._clock = clock
        self._records: OrderedDict[str, StoredRecord] = OrderedDict()  # top-level records, oldest first
        self._parents: dict[str, str] = {}  # child key -> parent key

    def __len__(self) -> int:
        return len(self._records)

    async def add(
        self, key: str, value: JsonObject, *, expires_at: float | None = None, parent: str | None = None
    ) -> None:
        value = checked(value)
        self._prune()
        if key in self._records or key in self._parents:
            return
        if parent is None:
            self._records[key] = StoredRecord(key, value, expires_at)
            while len(self._records) > self._limit:
                self._forget(next(iter(self._records)))
            return
        owner = self._records.get(parent)
        if owner is not None:
            self._records[parent] = replace(owner, children={**owner.children, key: value})
            self._parents[key] = parent

    async def put(self, key: str, value: JsonObject, *, expires_at: float | None = None) -> None:
        value = checked(value)
        parent = self._parents.get(key)
        if parent is not None:
            owner = self._records[parent]
            self._records[parent] = replace(owner, children={**owner.children, key: value})
            return
        old = self._records.pop(key, None)
        self._records[key] = StoredRecord(key, value, expires_at, old.children if old is not None else {})

    async def get(self, key: str) -> StoredRecord | None:
        parent = self._parents.get(key)
        if parent is not None:
            return StoredRecord(key, self._records[parent].children[key], None)
        return self._records.get(key)

    async def expire(self, key: str, at: float) -> None:
        record = self._records.get(key)
        if record is not None and (record.expires_at is None or at < record.expires_at):
            self._records[key] = replace(record, expires_at=at)

    async def delete(self, key: str) -> None:
        parent = self._parents.pop(key, None)
        if parent is not None:
            owner = self._records[parent]
            self._records[parent] = replace(
                owner, children={k: v for k, v in owner.children.items() if k != key}
            )
            return
        self._forget(key)

    def _prune(self) -> None:
        """Drop the records kept long enough past their expiry (when a record is added, as the
        gateway's store does)."""
        horizon = self._clock() - self._keep
        old = [key for key, r in self._records.items() if r.expires_at is not None and r.expires_at < horizon]
        for key in old:
            self._forget(key)

    def _forget(self, key: str) -> None:
        record = self._records.pop(key, None)
        for child in record.children if record is not None else ():
            self._parents.pop(child, None)
