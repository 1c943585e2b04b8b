"""Meta's webhook: the verification GET, the ``X-Hub-Signature-256`` check, and what a POST carries.

A POST body is ``{"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "messages",
"value": {...}}]}]}``; each value has ``metadata.phone_number_id`` (one app may serve several numbers:
only this bot's are read), ``contacts`` (names), ``messages`` (what people wrote) and ``statuses``
(what became of the bot's messages). Pure: the adapter does the I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.base import Attachment, ChatType, DeliveryStatus, InboundMessage
from adapters.names import clean_name

from .settings import PLATFORM

SIGNATURE_HEADER = "X-Hub-Signature-256"
_MEDIA_KINDS = {"image": "photo", "document": "document", "video": "video", "sticker": "sticker"}
_STATUSES = ("sent", "delivered", "read", "failed")


def signature_ok(app_secret: str, body: bytes, header: str | None) -> bool:
    """``sha256=`` HMAC-SHA256 of the raw body with the app secret, compared in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.removeprefix("sha256=").strip().lower().encode())


def challenge(query: Mapping[str, str], verify_token: str) -> str | None:
    """The challenge to echo when Meta verifies the callback URL with the right token, else None."""
    given = query.get("hub.verify_token", "")
    if query.get("hub.mode") != "subscribe" or not hmac.compare_digest(given.encode(), verify_token.encode()):
        return None
    return query.get("hub.challenge", "")


@dataclass
class Received:
    """What one POST carried for this number."""

    messages: list[InboundMessage] = field(default_factory=list)
    statuses: list[DeliveryStatus] = field(default_factory=list)


def read(payload: Any, phone_number_id: str) -> Received:
    """The messages and statuses of ``payload`` for ``phone_number_id``; ``ValueError`` when it is not a
    WhatsApp webhook body."""
    if not isinstance(payload, dict) or payload.get("object") != "whatsapp_business_account":
        raise ValueError("not a WhatsApp Business Account webhook")
    received = Received()
    for entry in _list(payload.get("entry")):
        for change in _list(entry.get("changes")):
            value = change.get("value")
            if change.get("field") != "messages" or not isinstance(value, dict):
                continue
            if str((value.get("metadata") or {}).get("phone_number_id", "")) != phone_number_id:
                continue
            names = {
                str(contact.get("wa_id")): str((contact.get("profile") or {}).get("name") or "")
                for contact in _list(value.get("contacts"))
            }
            received.messages.extend(
                inbound for item in _list(value.get("messages")) if (inbound := to_inbound(item, names))
            )
            received.statuses.extend(
                status for item in _list(value.get("statuses")) if (status := to_status(item)) is not None
            )
    return received


def to_inbound(message: Mapping[str, Any], names: Mapping[str, str]) -> InboundMessage | None:
    """One message a person sent (None for what is not one for the bot: a system notice, a reaction)."""
    sender, message_id, kind = (
        str(message.get("from") or ""),
        str(message.get("id") or ""),
        message.get("type"),
    )
    if not sender or not message_id or kind in (None, "system", "unsupported", "reaction"):
        return None
    body = message.get(kind) if isinstance(kind, str) else None
    body = body if isinstance(body, dict) else {}
    text = ""
    attachments: tuple[Attachment, ...] = ()
    if kind == "text":
        text = str(body.get("body") or "")
    elif kind == "audio":
        attachments = (_attachment("voice" if body.get("voice") else "audio", body),)
    elif kind in _MEDIA_KINDS:
        text = str(body.get("caption") or "")
        attachments = (_attachment(_MEDIA_KINDS[kind], body),)
    elif kind == "button":
        text = str(body.get("text") or "")
    elif kind == "interactive":
        reply = body.get("button_reply") or body.get("list_reply") or {}
        text = str(reply.get("title") or "")
    elif kind == "location":
        place = ", ".join(str(body[k]) for k in ("name", "address") if body.get(k))
        text = f"(location: {body.get('latitude')}, {body.get('longitude')}{'; ' + place if place else ''})"
    else:  # contacts, order...: content with no file Herald reads
        attachments = (Attachment(str(kind), ""),)
    context = message.get("context")
    replied = context.get("id") if isinstance(context, dict) else None
    return InboundMessage(
        platform=PLATFORM,
        chat_id=sender,
        chat_type=ChatType.DIRECT,
        user_id=sender,
        user_name=clean_name(names.get(sender) or sender),
        message_id=message_id,
        text=text,
        timestamp=_seconds(message.get("timestamp")),
        reply_to_id=str(replied) if replied else None,
        addressed=True,
        attachments=attachments,
    )


def to_status(item: Any) -> DeliveryStatus | None:
    if not isinstance(item, dict) or item.get("status") not in _STATUSES:
        return None
    error = None
    if item["status"] == "failed":
        errors = _list(item.get("errors"))
        first = errors[0] if errors else {}
        details = (first.get("error_data") or {}).get("details") if isinstance(first, dict) else None
        error = f"WhatsApp error {first.get('code', '?')}: {details or first.get('title') or 'failed'}"
    return DeliveryStatus(
        PLATFORM, str(item.get("recipient_id") or ""), str(item.get("id") or ""), item["status"], error
    )


def _attachment(kind: str, body: Mapping[str, Any]) -> Attachment:
    size = body.get("file_size")
    return Attachment(
        kind, str(body.get("id") or ""), name=body.get("filename") or None,
        mime_type=body.get("mime_type") or None, size=size if isinstance(size, int) else None,
    )  # fmt: skip


def _seconds(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _list(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
