"""The ledger of messages in and replies out: the inbox (every message the gateway will act on, stored
before it is confirmed) and the outbox (every reply, queued before it is sent), and the one transaction
that queues a reply and closes the message it answers (``Outbox.queue`` with ``finish``).

A floor below intake, delivery and access: they all write here, and it imports none of them.
"""
