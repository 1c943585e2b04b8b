"""The Slack adapter: slack_sdk (async, aiohttp) in, neutral ``InboundMessage`` out.

Modules: ``spec`` (the registration the gateway reads; ``settings``, its config section: neither
imports slack_sdk), ``adapter`` (``SlackAdapter``: lifecycle, the inbound hand-over, outbound
operations), ``socket`` (Socket Mode: one ordered consumer that stores before it acknowledges, a
replaced connection reported and caught up), ``catchup`` (what the socket missed, from
``conversations.history``/``conversations.replies`` since the last seen ``ts``), ``events`` (the Events
API over HTTP: signatures, retries), ``inbound`` (pure conversion of events and slash commands),
``render`` (Markdown to mrkdwn, split), ``home`` (the App Home view), ``files`` (downloads that refuse a
sign-in page), ``errors`` (``SlackApiError`` to ``DeliveryError``).

Bolt is not used: its listeners acknowledge before or regardless of the gateway's store, and it does
not deduplicate redeliveries; the contract needs "store, then acknowledge", which slack_sdk's Socket
Mode client and signature verifier give directly.
"""
