"""The Telegram adapter: python-telegram-bot 22.x in, neutral ``InboundMessage`` out.

Modules: ``spec`` (the registration the gateway reads; ``settings``, its config section: neither
imports python-telegram-bot), ``adapter`` (``TelegramAdapter``: lifecycle, outbound operations, webhook
entry point), ``render`` (Markdown to text plus entities, split to Telegram's limit),
``inbound`` (pure conversion of ``telegram.Message``), ``outbound`` (neutral values to PTB
arguments), ``errors`` (PTB errors to ``DeliveryError``), ``polling`` (store-before-confirm
``getUpdates`` loop), ``ratelimit`` (``AIORateLimiter`` with bounded flood waits), ``webhook``
(secret and body parsing), ``redaction`` (the token out of logs).

Logging: the bot token is part of every Bot API URL. Herald's own log lines never contain it
(errors go through ``redaction.describe``), but the ``httpx`` logger prints each request URL at
INFO and PTB's ``telegram`` loggers print URLs and parameters at DEBUG. While the adapter runs, a
``redaction.TokenFilter`` on those loggers masks the token; still, keep ``httpx``, ``httpcore``
and ``telegram`` at WARNING or above in every deployment (the CLI's ``configure_logging`` does,
since the root logger stays at WARNING).
"""
