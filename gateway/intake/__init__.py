"""From a platform's message to a lane's work: the router, the inbox, the lanes and their worker.
"""
