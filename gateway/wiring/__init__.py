"""The composition: where the gateway's parts are built and handed what they use.

``runtime`` opens the agent and what it runs on (database, store, locks, providers, tools), ``services``
is the bundle of the gateway's collaborators built on it, and ``core`` opens both with the router, lanes
and outbox sender that every way of talking to Herald shares (``handlers`` gives intake its handlers).
Only the entry points above it (``gateway.app``, ``gateway.cli``, ``gateway.doctor``) import the wiring;
every part below takes a narrow context of its own (a protocol naming what it reads), which
:class:`~gateway.wiring.services.Services` satisfies.
"""
