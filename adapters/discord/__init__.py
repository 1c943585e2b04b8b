"""The Discord adapter: discord.py 2.x in, neutral ``InboundMessage`` out.

Modules: ``spec`` (the registration the gateway reads; ``settings``, its config section: neither
imports discord.py), ``adapter`` (``DiscordAdapter``: lifecycle, inbound hand-over, outbound operations),
``client`` (the ``discord.Client`` subclass, intents, the process-wide endpoints, quiet loggers),
``inbound`` (pure conversion of ``discord.Message`` and slash-command interactions), ``outbound``
(neutral values to discord.py arguments, mention safety), ``commands`` (the command table as
application commands and back), ``interactions`` (deferred slash commands answered through
``send``), ``interaction_records`` (what it keeps of them, in the record store it is given),
``ordering`` (one chat's messages to the sink in order), ``errors`` (discord.py errors to
``DeliveryError``).

Logging: the token never appears in Herald's lines (errors go through ``redaction.describe``).
discord.py logs request bodies and gateway payloads at DEBUG; while the adapter runs the
``discord`` logger is kept at WARNING or above and a token filter guards its module loggers.
"""
