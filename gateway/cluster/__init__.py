"""Several gateway processes on one Redis and one PostgreSQL (``cluster.redis_url``).

Redis coordinates and holds no fact: the work queue here is a Redis stream of "there is work for this
chat" entries over the inbox rows stored in PostgreSQL, which stay the truth (ARCHITECTURE.md, Scale).
"""

KEY_PREFIX = "herald"  # every key and channel of the cluster starts with this (one bot per Redis database)
