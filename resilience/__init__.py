"""How Herald waits, retries and keeps what it holds: used by the agent, the gateway and the adapters.

Five ideas, each with one home, so that the agent's provider retries, the outbox sender, Telegram's
polling, MCP restarts, the database outage wait and every lease of the cluster behave alike:

- ``backoff``: how long to wait before trying again (:class:`~resilience.backoff.Backoff`);
- ``loops``: a background task that logs what it did not expect and goes on, stopped once
  (:class:`~resilience.loops.BackgroundLoop`);
- ``cancelling``: stopping tasks for good, even one whose cancellation a client library lost
  (:func:`~resilience.cancelling.cancel_and_wait`), and carrying to its end work a cancelled caller
  must not cut off half-way (:class:`~resilience.cancelling.CarriedThrough`: a database operation, a
  stored batch, an outbox item's send);
- ``renewal``: keeping a lease alive and knowing when to stop trusting it
  (:class:`~resilience.renewal.Renewer`), whatever holds the lease (Redis, the database);
- ``unreachable``: the one meaning of "the service is away now"
  (:class:`~resilience.unreachable.Unreachable`).

A package of its own because every layer needs it and adapters may import neither the agent nor the
gateway: it imports nothing of Herald and no third-party library (``tests/house/test_layering.py``).
"""
