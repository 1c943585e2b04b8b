"""``herald doctor``'s browser check: can the browser tool set start Chromium here, and if not, why not.

The browser starts at a session's first browser call, so a missing Chromium would otherwise show only
as a tool error in a chat. Doctor looks for what the start needs (Playwright, the Chromium program) and
says how to get what is missing; it does not start a browser.
"""

from __future__ import annotations

from agent.api import browser_missing
from gateway.doctor.findings import DoctorContext, Finding

SUBJECT = "browser"
TOOLSET = "browser"


async def check_browser(ctx: DoctorContext) -> list[Finding]:
    """Whether the browser tools' Chromium can start (only when agent.toolsets names the browser)."""
    if ctx.config is None:
        return [Finding("skip", SUBJECT, "not checked: config.yaml is invalid (see above).")]
    if TOOLSET not in ctx.config.agent.toolsets:
        return [Finding("skip", SUBJECT, "the browser tool set is off (agent.toolsets).")]
    settings = ctx.config.web.browser
    reason = browser_missing(settings)
    if reason is not None:
        return [Finding("fail", SUBJECT, f"{reason}; the browser tools answer with this error until then.")]
    return [Finding("ok", SUBJECT, f"Chromium at {settings.executable} and Playwright are installed.")]
