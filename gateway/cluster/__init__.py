"""Several gateway processes on one Redis and one PostgreSQL (``cluster.redis_url``)."""
