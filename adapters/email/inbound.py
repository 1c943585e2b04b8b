"""A received mail, read: who sent it, which thread it belongs to, the words that are new in it, its
files, and whether it was sent by a machine (which is never answered). Pure: bytes in, :class:`Mail` out.

What reaches the model is what the person wrote this time: the quoted mail below a reply (lines that
start with ``>``, the "On … wrote:" line that heads them, an "Original Message" block) and the
signature (after a ``-- `` line) are cut. An HTML-only mail is turned into text, its quoted part
(``<blockquote>``, Gmail's ``gmail_quote``) left out the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses, parsedate_to_datetime
from html.parser import HTMLParser

from .settings import address_of

_PARSER = BytesParser(policy=policy.default)
_ID = re.compile(r"<[^<>\s]+>")
_WROTE = re.compile(
    r"^\s*(On|Le|Am|El|Il|Op)\b.{0,300}(wrote|écrit|schrieb|escribió|scritto|schreef)\s*:\s*$", re.I | re.S
)
_ORIGINAL = re.compile(r"^\s*-{2,}\s*(Original Message|Forwarded message)\s*-{2,}\s*$", re.I)
_OUTLOOK = re.compile(r"^\s*_{10,}\s*$")  # Outlook's rule above "From: … Sent: …"
_BULK = frozenset({"bulk", "list", "junk"})
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


@dataclass(frozen=True)
class Part:
    """A file that came with a mail: ``index`` is its place in the mail's parts (what fetches it again)."""

    index: int
    name: str | None
    mime_type: str
    size: int


@dataclass(frozen=True)
class Mail:
    message_id: str  # "<id@host>", as the headers write it
    sender: str  # the From address, lower case
    sender_name: str
    subject: str
    references: tuple[str, ...]  # the thread so far, oldest first (References, else In-Reply-To)
    in_reply_to: str | None
    text: str  # what is new in it (quoting and signature cut), subject first when it says more
    parts: tuple[Part, ...]
    automatic: str | None  # why it was sent by a machine (RFC 3834: never answered), else None
    timestamp: float | None


def read_mail(raw: bytes, fallback_id: str) -> Mail:
    """Read one mail (``fallback_id`` names it when it has no Message-ID)."""
    message = _PARSER.parsebytes(raw)
    assert isinstance(message, EmailMessage)
    ids = _ID.findall(str(message.get("Message-ID", "")))
    reply_ids = _ID.findall(str(message.get("In-Reply-To", "")))
    references = tuple(_ID.findall(str(message.get("References", "")))) or tuple(reply_ids[:1])
    name, sender = _sender(message)
    subject = " ".join(str(message.get("Subject", "")).split())
    body = new_words(_body(message))
    return Mail(
        message_id=ids[0] if ids else fallback_id,
        sender=sender,
        sender_name=name,
        subject=subject,
        references=references,
        in_reply_to=reply_ids[0] if reply_ids else None,
        text=_with_subject(subject, body) if not references else body,
        parts=tuple(_parts(message)),
        automatic=automatic(message),
        timestamp=_timestamp(message),
    )


def automatic(message: Message) -> str | None:
    """Why a mail must not be answered (RFC 3834): a machine sent it, or it went to a list."""
    submitted = str(message.get("Auto-Submitted", "")).strip().lower()
    if submitted and not submitted.startswith("no"):
        return f"Auto-Submitted: {submitted}"
    precedence = str(message.get("Precedence", "")).strip().lower()
    if precedence in _BULK:
        return f"Precedence: {precedence}"
    if message.get("List-Id") is not None:
        return "List-Id"
    if str(message.get("Return-Path", "")).strip() == "<>":
        return "a bounce (empty Return-Path)"
    return None


def new_words(text: str) -> str:
    """``text`` without what it quotes and without its signature (all of it when nothing else is left)."""
    lines = text.replace("\r\n", "\n").split("\n")
    kept: list[str] = []
    for number, line in enumerate(lines):
        if line.rstrip() == "--":
            break  # a signature ("-- ", or "--" once a mail program trimmed the space)
        if _ORIGINAL.match(line) or (_OUTLOOK.match(line) and _starts_header(lines[number + 1 :])):
            break
        if line.lstrip().startswith(">"):
            continue
        if _heads_quote(lines, number):
            continue
        if kept and _heads_quote(lines, number, joined=kept[-1]):
            kept.pop()
            continue
        kept.append(line)
    words = "\n".join(kept).strip()
    return words or text.strip()


def _heads_quote(lines: list[str], number: int, joined: str | None = None) -> bool:
    """Line ``number`` (after ``joined``, its first half when a mail program wrapped it) is the "On …
    wrote:" line above a quote: it matches, and the next line with words is quoted."""
    line = lines[number] if joined is None else f"{joined} {lines[number]}"
    if not _WROTE.match(line):
        return False
    following = next((rest for rest in lines[number + 1 :] if rest.strip()), "")
    return following.lstrip().startswith(">")


def _starts_header(rest: list[str]) -> bool:
    return bool(rest) and rest[0].lstrip().lower().startswith("from:")


def _with_subject(subject: str, body: str) -> str:
    """A new thread's subject is part of what was asked, unless the body says it already."""
    if not subject or body.lower().startswith(subject.lower()):
        return body
    return f"{subject}\n\n{body}" if body else subject


def _sender(message: EmailMessage) -> tuple[str, str]:
    found = getaddresses([str(message.get("From", ""))])
    name, address = found[0] if found else ("", "")
    return name.strip(), address_of(address)


def _timestamp(message: EmailMessage) -> float | None:
    try:
        return parsedate_to_datetime(str(message.get("Date", ""))).timestamp()
    except (TypeError, ValueError):
        return None


def _body(message: EmailMessage) -> str:
    """The mail's text: its text/plain part, else its HTML as text."""
    plain = message.get_body(preferencelist=("plain",))
    if isinstance(plain, EmailMessage):
        return _content(plain)
    html = message.get_body(preferencelist=("html",))
    if isinstance(html, EmailMessage):
        return html_to_text(_content(html))
    return ""


def _content(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except (LookupError, ValueError):  # an unknown charset: the bytes as Latin-1 lose nothing
        payload = part.get_payload(decode=True)
        return payload.decode("latin-1") if isinstance(payload, bytes) else ""
    return content if isinstance(content, str) else ""


def is_file(part: Message) -> bool:
    """A part that is a file of the mail: attached, or a non-text part not shown inside its HTML."""
    if part.is_multipart():
        return False
    disposition = (part.get_content_disposition() or "").lower()
    if disposition == "attachment":
        return True
    return (
        part.get_content_maintype() not in ("text", "multipart", "message") and part.get("Content-ID") is None
    )


def _parts(message: EmailMessage) -> list[Part]:
    found = []
    for index, part in enumerate(message.walk()):
        if is_file(part):
            payload = part.get_payload(decode=True)
            size = len(payload) if isinstance(payload, bytes) else 0
            found.append(Part(index, part.get_filename(), part.get_content_type(), size))
    return found


def part_bytes(raw: bytes, index: int) -> bytes | None:
    """The decoded content of part ``index`` of a mail (None: no such file)."""
    for position, part in enumerate(_read(raw).walk()):
        if position == index and is_file(part):
            payload = part.get_payload(decode=True)
            return payload if isinstance(payload, bytes) else b""
    return None


def _read(raw: bytes) -> EmailMessage:
    message = _PARSER.parsebytes(raw)
    assert isinstance(message, EmailMessage)
    return message


class _Text(HTMLParser):
    """HTML to plain text: blocks become lines, quoted mail and scripts are left out."""

    BLOCKS = frozenset({"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table"})
    HIDDEN = frozenset({"script", "style", "head", "title", "blockquote"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.hidden: list[str] = []  # the open elements whose content is left out

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = " ".join(value or "" for key, value in attrs if key == "class")
        if self.hidden or tag in self.HIDDEN or "gmail_quote" in classes:
            if tag not in ("br", "img", "hr", "meta", "link", "input"):
                self.hidden.append(tag)
            return
        if tag in self.BLOCKS:
            self.out.append("\n")
        if tag == "li":
            self.out.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if self.hidden:
            if tag in self.hidden:
                while self.hidden and self.hidden.pop() != tag:
                    pass
            return
        if tag in self.BLOCKS:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = [line.strip() for line in "".join(parser.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
