"""Cache-miss reports: what each request should have read from the provider's cache, and why it did not.

Herald knows every request it sent, so it knows what the provider's prefix cache should hold for a
session. After each answered request, :class:`~agent.cache_watch.CacheWatch` compares the cache
read the provider reported with the read the request should have got and stores a shortfall as a
:class:`~agent.store.cache_misses.CacheMiss` with its cause and price.

- :mod:`agent.cache_misses.chain`: a request body as the cache sees it (pure).
- :mod:`agent.cache_misses.reads`: which earlier prefix a request can read under each provider's rules (pure).
- :mod:`agent.cache_misses.diagnosis`: the expected read, the shortfall, its cause and its price (pure).
- :mod:`agent.store.cache_misses`: the stored prefix records and events, and the read API.
- :mod:`agent.cache_watch`: the one call each request path makes; the I/O around the pure parts (above
  the store, which records this package's vocabulary).
"""
