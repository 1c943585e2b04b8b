"""Leases in the cluster's Redis and what holds them: the leader (and the duties it runs), Discord's
shards, sessions (with fencing tokens) and review claims, all on one ``RedisLease`` renewed by
``resilience.renewal``.
"""
