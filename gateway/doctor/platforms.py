"""``herald doctor``'s platform checks: is each configured bot token accepted by its platform?

One cheap authenticated request per platform (Telegram ``getMe``, Discord ``GET /users/@me``) with a
short timeout, made with aiohttp so the check needs neither platform SDK. The token is never printed.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from gateway.app import DISCORD_TOKEN, TELEGRAM_TOKEN
from gateway.doctor.findings import DoctorContext, Finding

TELEGRAM_API = "https://api.telegram.org/bot"
DISCORD_API = "https://discord.com/api/v10"


@dataclass(frozen=True)
class Probe:
    platform: str
    variable: str
    url: str
    headers: dict[str, str]
    fix: str  # what to do when the token is refused


def probes(ctx: DoctorContext) -> list[Probe | Finding]:
    """A probe per platform with a token, a "skip" finding per platform without one."""
    assert ctx.config is not None
    found: list[Probe | Finding] = []
    telegram = ctx.environ.get(TELEGRAM_TOKEN, "").strip()
    if telegram:
        base = ctx.config.telegram.base_url or TELEGRAM_API
        found.append(
            Probe("telegram", TELEGRAM_TOKEN, f"{base}{telegram}/getMe", {}, "ask @BotFather for the token")
        )
    else:
        found.append(Finding("skip", "telegram", f"not enabled ({TELEGRAM_TOKEN} is not set)."))
    discord = ctx.environ.get(DISCORD_TOKEN, "").strip()
    if discord:
        base = (ctx.config.discord.api_base or DISCORD_API).rstrip("/")
        found.append(
            Probe(
                "discord",
                DISCORD_TOKEN,
                f"{base}/users/@me",
                {"Authorization": f"Bot {discord}"},
                "reset the token under Bot in the Discord developer portal",
            )
        )
    else:
        found.append(Finding("skip", "discord", f"not enabled ({DISCORD_TOKEN} is not set)."))
    return found


async def check_platforms(ctx: DoctorContext) -> list[Finding]:
    """Each enabled platform accepts its token (skipped with ``--offline`` or an invalid config)."""
    if ctx.config is None:
        return [Finding("skip", "platforms", "not checked: config.yaml is invalid (see above).")]
    findings: list[Finding] = []
    for item in probes(ctx):
        if isinstance(item, Finding):
            findings.append(item)
        elif ctx.offline:
            findings.append(Finding("skip", item.platform, "token present; not checked (--offline)."))
        else:
            findings.append(await probe(item, ctx.timeout))
    return findings


async def probe(item: Probe, seconds: float) -> Finding:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as client,
            client.get(item.url, headers=item.headers) as response,
        ):
            status = response.status
            body = await response.json(content_type=None) if status == 200 else {}
    except (TimeoutError, aiohttp.ClientError, ValueError) as error:
        reason = type(error).__name__
        return Finding("fail", item.platform, f"could not be reached ({reason}); check the network.")
    if status in (401, 403, 404):
        return Finding("fail", item.platform, f"refused {item.variable} (HTTP {status}): {item.fix}.")
    if status != 200:
        return Finding("warn", item.platform, f"answered HTTP {status}; it may be busy, try again later.")
    user = body.get("result", body) if isinstance(body, dict) else {}
    name = user.get("username") if isinstance(user, dict) else None
    return Finding("ok", item.platform, f"token accepted (bot @{name}).")
