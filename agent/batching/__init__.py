"""Half price for work that can wait: requests sent through a provider's batch API.

- :mod:`agent.batching.mode`: who asks for it (a scheduled job marked ``batch``, a background review with
  ``agent.review_batch``), by a context around their requests, with the deadline by which an answer must
  be there;
- :mod:`agent.batching.road`: submit (or find again after a restart), poll, read the answer, fall back.

``agent.model_calls`` is the one caller: a batch request is admitted, recorded and settled like any other,
at :data:`agent.usage.BATCH_PRICE` of the normal price.
"""
