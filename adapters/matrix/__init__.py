"""Matrix: DMs and rooms on any homeserver through mautrix's client-server API (``adapter``), the
registration the gateway reads (``spec``, ``settings``), Markdown to Matrix HTML (``formatted``), and the
pure reading of ``/sync`` answers (``inbound``). Importing this package does not import mautrix."""
