"""A fake of Meta's WhatsApp Cloud API on 127.0.0.1, written from Meta's documentation: the Graph API
endpoints the adapter calls, and Meta's side of the webhook (the verification GET, signed POSTs,
retries until answered 200)."""

from .server import APP_SECRET, NUMBER_ID, TOKEN, VERIFY_TOKEN, BotMessage, FakeWhatsApp

__all__ = ["APP_SECRET", "NUMBER_ID", "TOKEN", "VERIFY_TOKEN", "BotMessage", "FakeWhatsApp"]
