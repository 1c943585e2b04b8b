"""What every process counts together through Redis: platforms' send rates and 429 pauses (the send
pacing), the model request cap, and the spend gate's figures.
"""
