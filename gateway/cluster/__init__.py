"""Several gateway processes on one Redis and one PostgreSQL (``cluster.redis_url``).

Redis coordinates and holds nothing that matters; PostgreSQL holds every fact (ARCHITECTURE.md,
"Scale"). Modules: ``redis`` (the connection, what "unreachable" means, the process's name),
``session_locks`` (fenced session leases), ``budget`` (the shared send budget), ``sending`` (claims
and budget, built for the sender). Imported only in cluster mode: one process needs no Redis.
"""
