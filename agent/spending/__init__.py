"""Spend limits: what a model request may cost before it is sent, and what it did cost after.

Every model request of every purpose passes :class:`agent.model_calls.ModelCalls`, which asks the
:class:`~agent.spending.gate.SpendGate` before sending (the request's estimated cost must fit every
limit of whoever pays for it) and records the provider's reported usage after it, priced from the model
table with its cache prices, in the same transaction as the request's usage row.

- :mod:`agent.spending.windows`: the day, the month and the run a cost counts in (pure).
- :mod:`agent.spending.charge`: who pays for the requests made now (a ``ContextVar`` of the task).
- :mod:`agent.spending.rules`: does a request fit, has a warning threshold been crossed (pure).
- :mod:`agent.spending.estimate`: a request's cost before it is sent (pure).
- :mod:`agent.spending.counters`: spent and reserved per scope and window, as the gate reads them.
- :mod:`agent.spending.gate`: reserve before, settle after.

The agent knows scopes only as opaque keys with limits; which scopes a chat's message, a review or a
scheduled run is charged to is the gateway's business (``gateway.budgets``).
"""
