"""Limits every process shares through Redis: platforms' send rates and 429 pauses, the model request
cap, and the spend gate's figures.
"""
