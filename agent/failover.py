"""Fallback models: which model answers while a session's own keeps failing, and when it is back.

A session is built for one model, its primary (its prompt names it, its cache lives there). When a
request to it still fails after its retries with a failure on the provider's side (:func:`fails_over`:
overloaded, rate-limited, 5xx, a timeout, a dropped connection, a malformed answer; never a request
refused as invalid, a missing key, nor a spend limit, which no other model would change), the primary is
marked failing (an :class:`Outage`) and the request goes to the configured fallbacks in order, with the
session's own stored prompt bytes (each provider renders them in its wire format).

While it is marked, the primary's requests go straight to the fallbacks: nobody waits through the retries
of a model known to fail. At most every ``probe_interval`` seconds, one of those requests also has a probe
sent to the primary in the background (:meth:`Failover.probe_due`; a few tokens in, one out, no retries;
``agent.model_calls`` sends it). Once a probe is answered the outage ends and the next request goes to the
primary again. There is no probing while nothing asks for the primary: an idle outage costs nothing.

The state lives in this process's memory: each process of a cluster finds out for itself, and a restart
tries the primary first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.model.provider import FailedOver, Provider, ProviderError
from agent.providers.pool import ProviderKey

log = logging.getLogger(__name__)

PROBE = "probe"  # the purpose a probe's usage is recorded as
# Purposes that wait for the primary instead of falling back: a background review (agent.side.REVIEW) is
# not urgent, and on a fallback it would pay to write the whole conversation into another cache.
WAITS_FOR_PRIMARY = frozenset({"review", PROBE})
# Kinds of failure another model cannot help with (agent.providers.errors; "budget": a spend limit).
NOT_THE_PROVIDERS_FAULT = frozenset({"budget", "configuration", "internal"})

_STATUS_REASONS = {429: "is rate-limited", 529: "is overloaded", 408: "timed out"}
_KIND_REASONS = {
    "overloaded_error": "is overloaded",
    "rate_limit_error": "is rate-limited",
    "timeout": "is not answering in time",
    "unreachable": "cannot be reached",
    "connection": "keeps dropping the connection",
    "malformed": "sends malformed answers",
}


def fails_over(error: ProviderError) -> bool:
    """Whether another model may answer what ``error`` stopped: the provider's side failed (what is
    retried: 408/409/429/5xx/529, timeouts, dropped connections, malformed answers), not the request."""
    return error.retryable and error.kind not in NOT_THE_PROVIDERS_FAULT


def failure_reason(error: ProviderError) -> str:
    """What is wrong with the main model, as the end of a sentence: "is overloaded"."""
    if error.status in _STATUS_REASONS:
        return _STATUS_REASONS[error.status]
    if error.kind in _KIND_REASONS:
        return _KIND_REASONS[error.kind]
    if error.status is not None and error.status >= 500:
        return f"has an internal error (HTTP {error.status})"
    return "is failing"


def failover_line(failovers: Sequence[FailedOver]) -> str | None:
    """The line for an answer some of whose requests were answered by fallbacks (None: none were)."""
    if not failovers:
        return None
    models = list(dict.fromkeys(f.fallback for f in failovers))
    return FailedOver(failovers[0].primary, " and ".join(models), failovers[-1].reason).line


@dataclass
class Outage:
    """A primary marked failing: since when, why, and when it may be probed next."""

    error: ProviderError  # the latest failure (the first request's, then the probes')
    since: float
    next_probe: float
    probing: bool = False  # a probe is in flight


class Failover:
    """The fallback chain and the outages of the primaries it stands in for (this process's view).

    ``chain``: the configured fallbacks in order; ``clients`` builds one (the provider pool's ``get``: it
    raises ``ProviderError`` when it cannot, e.g. without its key, and that fallback is left out).
    """

    def __init__(
        self,
        chain: Sequence[ProviderKey],
        clients: Callable[[ProviderKey], Provider],
        *,
        probe_interval: float,
    ) -> None:
        self.chain = tuple(chain)
        self.clients = clients
        self.probe_interval = probe_interval
        self._outages: dict[Provider, Outage] = {}
        self._unusable: set[ProviderKey] = set()  # fallbacks whose client could not be built (logged once)

    def fallbacks(self, primary: Provider) -> list[Provider]:
        """The clients that stand in for ``primary``, in order (never ``primary`` itself)."""
        found: list[Provider] = []
        for key in self.chain:
            try:
                client = self.clients(key)
            except ProviderError as error:
                if key not in self._unusable:
                    self._unusable.add(key)
                    log.warning("fallback model %s/%s is left out: %s", key.provider, key.model, error)
                continue
            if client is not primary:
                found.append(client)
        return found

    def outage(self, primary: Provider) -> Outage | None:
        return self._outages.get(primary)

    def failed(self, primary: Provider, error: ProviderError, now: float) -> Outage:
        """Mark ``primary`` failing (a request's retries ran out with ``error``); the first probe is due
        one interval from now."""
        outage = self._outages.get(primary)
        if outage is None:
            outage = Outage(error, since=now, next_probe=now + self.probe_interval)
            self._outages[primary] = outage
            log.warning(
                "model %s failed (%s); its requests go to the fallback models until a probe is answered",
                primary.model, error,
            )  # fmt: skip
        return outage

    def probe_due(self, primary: Provider, now: float) -> bool:
        """Whether a probe of ``primary`` should start now; if so it counts as started (call
        :meth:`probed` when it ends)."""
        outage = self._outages.get(primary)
        if outage is None or outage.probing or now < outage.next_probe:
            return False
        outage.probing = True
        return True

    def probed(self, primary: Provider, error: ProviderError | None, now: float) -> None:
        """A probe of ``primary`` ended: answered (``error`` None: the outage is over) or failed with
        ``error`` (the next probe is due one interval from now)."""
        outage = self._outages.get(primary)
        if outage is None:
            return
        if error is None:
            del self._outages[primary]
            log.info(
                "model %s answers again after %.0f s; its requests go to it again",
                primary.model,
                now - outage.since,
            )
            return
        log.info(
            "model %s is still failing (%s); next probe in %.0f s", primary.model, error, self.probe_interval
        )
        outage.error = error
        self.postpone(primary, now)

    def postpone(self, primary: Provider, now: float) -> None:
        """A probe of ``primary`` could not be sent (a spend limit): try again one interval from now."""
        outage = self._outages.get(primary)
        if outage is not None:
            outage.probing, outage.next_probe = False, now + self.probe_interval
