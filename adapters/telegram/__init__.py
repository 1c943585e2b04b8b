"""The Telegram adapter: python-telegram-bot 22.x in, neutral ``InboundMessage`` out.

Modules: ``adapter`` (``TelegramAdapter``: lifecycle, outbound operations, webhook entry point),
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

from .adapter import TelegramAdapter
from .inbound import BotIdentity, to_inbound
from .webhook import SECRET_HEADER, webhook_secret

__all__ = ["SECRET_HEADER", "BotIdentity", "TelegramAdapter", "to_inbound", "webhook_secret"]
