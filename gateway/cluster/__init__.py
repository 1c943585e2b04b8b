"""Several gateway processes on one Redis and one PostgreSQL (``cluster.redis_url``).

Modules: ``connection`` (the Redis client and this process's instance id), ``leader`` (the leader
lease: the one process that runs what a platform allows once per bot), ``shards`` (Discord's shards
as leases spread over the processes), ``connector`` (what the elected process runs, wired to the
gateway), ``roles`` (what this process holds, for ``/readyz`` and ``/metrics``).
"""
