"""``herald doctor``'s platform checks: is each configured bot token accepted by its platform?

One cheap authenticated request per enabled platform (its spec's ``probe``: ``adapters.spec.TokenProbe``)
with a short timeout, made with aiohttp so the check needs no platform SDK; a platform not reached over
HTTP logs in instead (``adapters.spec.LoginProbe``). The token is never printed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp

from adapters.registry import PLATFORMS
from adapters.spec import LoginProbe, ProbeRefused, TokenProbe
from gateway.doctor.findings import DoctorContext, Finding


@dataclass(frozen=True)
class Probe:
    platform: str  # as the doctor's lines name it
    variable: str  # the token's variable
    request: TokenProbe | LoginProbe


def probes(ctx: DoctorContext) -> list[Probe | Finding]:
    """A probe per registered platform with a token, a "skip" finding per platform without one."""
    assert ctx.config is not None
    found: list[Probe | Finding] = []
    for spec in PLATFORMS:
        variable = spec.token.env
        if spec.enabled(ctx.environ):
            settings = ctx.config.platform_settings(spec)
            found.append(Probe(spec.name, variable, spec.probe(settings, spec.secrets_in(ctx.environ))))
        else:
            found.append(Finding("skip", spec.name, f"not enabled ({variable} is not set)."))
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
    request = item.request
    if isinstance(request, LoginProbe):
        return await log_in(item, request, seconds)
    body: Any = {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as client,
            client.request(request.method, request.url, headers=dict(request.headers)) as response,
        ):
            status = response.status
            if status == 200:
                body = await response.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError) as error:
        reason = type(error).__name__
        return Finding("fail", item.platform, f"could not be reached ({reason}); check the network.")
    name = request.bot_name(body) if status == 200 else None
    if status in (401, 403, 404) or (status == 200 and name is None):
        refused = f"HTTP {status}" if status != 200 else "the answer says so"
        return Finding("fail", item.platform, f"refused {item.variable} ({refused}): {request.fix}.")
    if status != 200:
        return Finding("warn", item.platform, f"answered HTTP {status}; it may be busy, try again later.")
    return Finding("ok", item.platform, f"token accepted (bot @{name}).")


async def log_in(item: Probe, request: LoginProbe, seconds: float) -> Finding:
    """A platform reached by logging in to its servers (not HTTP): the same three answers."""
    try:
        async with asyncio.timeout(seconds):
            name = await request.check(seconds)
    except ProbeRefused as error:
        return Finding("fail", item.platform, f"refused {item.variable}: {error}.")
    except (OSError, TimeoutError) as error:
        reason = type(error).__name__
        return Finding("fail", item.platform, f"could not be reached ({reason}); check the network.")
    return Finding("ok", item.platform, f"login accepted ({name}).")
