"""Retention: what only grows is pruned as storage.retention says, and a chat or a person can be forgotten."""
