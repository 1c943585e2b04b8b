"""Several gateway processes on one Redis and one PostgreSQL (``cluster.redis_url``).

Modules: ``connection`` (the Redis client and this process's default instance id), ``leader`` (the
leader lease: one process at a time runs what may run only once per bot), ``duties`` (what the leader
runs: a platform's receiving, the scheduler, the idle-review sweeper), ``shards`` (Discord's gateway
shards as leases spread over the processes), ``member`` (this process in the cluster: what it runs and
holds, for ``/readyz`` and ``/metrics``).
"""
