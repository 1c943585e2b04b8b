"""Getting replies out: the outbox and its sender, the one road for replies, streaming by edit, the
shared send budgets and rendering text for each platform.
"""
