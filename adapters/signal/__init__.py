"""Signal through signal-cli's JSON-RPC daemon (``signal-cli daemon --http``): see docs/signal.md."""
