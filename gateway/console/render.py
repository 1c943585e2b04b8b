"""Pages from Jinja templates with autoescaping on: every value a template prints is HTML-escaped
unless it was made markup on purpose, so a chat titled ``<img src=x onerror=alert(1)>`` shows as those
characters. The same holds inside the inline SVG charts (their text is printed by the same templates).

The stylesheet is inlined into each page and allowed by its hash in the Content-Security-Policy, which
allows nothing else: no script at all, no image or style from elsewhere, no framing, forms posting only
here.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2

from gateway.budgets.lines import on_day, rough_usd, usd
from gateway.console.charts import money, saving, tokens

STYLESHEET = (resources.files("gateway.console") / "templates" / "console.css").read_text(encoding="utf-8")
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLESHEET.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def percent(value: float) -> str:
    return f"{value:.1%}"


def count(value: int) -> str:
    return f"{value:,}"


class Renderer:
    """Renders the console's templates; times are shown in the page's ``zone`` (its bot's
    ``scheduler.timezone``, given by the bot's pages), else in ``timezone``."""

    def __init__(self, timezone: dt.tzinfo) -> None:
        self.timezone = timezone
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("gateway.console", "templates"),
            autoescape=True,  # every template, whatever its name: HTML with inline SVG
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            money=money,
            saving=saving,
            usd=usd,
            rough_usd=rough_usd,
            tokens=tokens,
            percent=percent,
            count=count,
            when=self.when,
            day=self.day,
            ago=self.ago,
        )
        self.env.globals["stylesheet"] = STYLESHEET

    @jinja2.pass_context
    def when(self, context: jinja2.runtime.Context, timestamp: float | None) -> str:
        if timestamp is None:
            return "—"
        zone = context.get("zone") or self.timezone
        return dt.datetime.fromtimestamp(timestamp, zone).strftime("%Y-%m-%d %H:%M")

    @jinja2.pass_context
    def day(self, context: jinja2.runtime.Context, timestamp: float) -> str:
        """"on 24 March", in the page's zone."""
        return on_day(timestamp, context.get("zone") or self.timezone)

    def ago(self, timestamp: float | None, now: float) -> str:
        if timestamp is None:
            return "—"
        seconds = max(0.0, now - timestamp)
        for size, unit in ((86_400, "d"), (3_600, "h"), (60, "min")):
            if seconds >= size:
                return f"{seconds / size:.0f} {unit} ago"
        return "just now"

    def page(self, template: str, values: Mapping[str, Any]) -> str:
        return self.env.get_template(template).render(**values)
