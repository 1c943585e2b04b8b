"""Getting replies out: the outbox's sender (the outbox itself is ``gateway.ledger``), the one road for
replies, streaming by edit, the shared send pacings and rendering text for each platform.
"""
