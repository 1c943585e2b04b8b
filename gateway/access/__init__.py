"""Who may talk to the bot: allowlists, admins and DM pairing.
"""
