"""Several gateway processes on one Redis and one PostgreSQL (``cluster.redis_url``).

Redis coordinates and holds nothing that matters; PostgreSQL holds every fact (docs/ARCHITECTURE.md,
"Scale"). Modules: ``redis`` (the connection, what "unreachable" means, the process's name), ``pool``
(its bounded pool of connections, waited for in turn, and their figures), ``lease``
(one lease in Redis, kept by ``resilience.renewal.Renewer``), ``session_locks`` (fenced session
leases), ``work_queue`` with ``work_stream``, ``chat_order`` and ``control`` (a Redis stream of "there
is work for this chat" entries over the inbox rows, cancels across processes), ``semaphore`` and
``request_limits`` (cluster-wide caps on turns and model requests), ``budget`` (the shared send
budget), ``sending`` (claims and budget, built for the sender), ``leader`` (the leader lease: one
process at a time runs what may run only once per bot), ``duties`` (what the leader runs: a platform's
receiving, the scheduler, the idle-review sweeper), ``shards`` (Discord's gateway shards as leases
spread over the processes), ``member`` (this process in the cluster: what it runs and holds, for
``/readyz`` and ``/metrics``), ``watch`` (hearing at once that the connection to Redis broke),
``instance`` (one running process per ``cluster.instance_id``), ``review_claims`` (one background
review per chat over the processes, stopped by a live turn on any of them). Imported only in cluster
mode: one process needs no Redis.
"""
