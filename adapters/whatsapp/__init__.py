"""WhatsApp through Meta's Cloud API (the Graph API over HTTP with aiohttp): a webhook in, ``/messages``
out. ``spec`` registers it; ``adapter`` wires ``webhook`` (signature, verification, payloads),
``graph`` (requests and errors), ``render`` (WhatsApp's markup) and ``window`` (the 24-hour rule)."""
