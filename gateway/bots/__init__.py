"""Several bots in one process (``bots:`` in config.yaml): who each bot is, as the gateway opens it."""
