"""A conversation's turn: its session, its files, hygiene, the agent's turn and the background reviews.
"""
