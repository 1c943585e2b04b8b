"""``herald doctor``: check a home and say, for each problem, what is wrong and how to fix it.

Doctor changes nothing: it creates, repairs and re-modes nothing, so it is safe to run on a damaged
home, and it is the first thing to run when something is off. Each check is an async function from
a :class:`DoctorContext` to findings; :func:`default_checks` is the list ``herald doctor`` runs, in
order, and a check may use what an earlier one found (the config, the environment with ``.env``).
The gateway adds its own checks (platform tokens) by passing a longer list to :func:`run_doctor`.
A check that raises is reported as failed with its error: one broken check never hides the others.

Exit code 0 when every check passed or was skipped, 1 when any warned or failed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from agent.db import READ_ONLY_HOME
from agent.files import loose_permissions, on_read_only_file_system
from gateway.config import ConfigError, HeraldConfig, load_config
from gateway.doctor.findings import MARKS, PROBLEMS, Check, DoctorContext, Finding
from gateway.failures import EXIT_FAILED, EXIT_OK, describe_os_error
from gateway.home import HeraldHome, load_env
from gateway.speech.synthesizers import missing_tts_key, tts_api_key
from gateway.speech.transcribers import missing_stt_key, stt_api_key
from gateway.wiring.providers import fallback_keys, key_variable, missing_key_error


def private_paths(home: HeraldHome) -> list[Path]:
    """Everything that must not be open to other users: the home, secrets, history, memory."""
    database = [home.db_path, *(home.db_path.with_name(home.db_path.name + s) for s in ("-wal", "-shm"))]
    paths = [home.root, home.env_path, *database, home.memories_dir]
    if home.memories_dir.is_dir():
        paths += sorted(p for p in home.memories_dir.rglob("*") if p.is_dir() or p.suffix == ".md")
    return paths


async def check_home(ctx: DoctorContext) -> list[Finding]:
    root = ctx.home.root
    if not root.exists():
        blocker = next((parent for parent in root.parents if parent.exists()), None)
        if blocker is not None and not blocker.is_dir():
            text = f"{root} cannot be created: {blocker} is not a directory; point HERALD_HOME elsewhere."
            return [Finding("fail", "home", text)]
        return [Finding("fail", "home", f"{root} does not exist; create it with `herald setup`.")]
    if not root.is_dir():
        return [Finding("fail", "home", f"{root} is not a directory; point HERALD_HOME at a directory.")]
    loose = [problem for path in private_paths(ctx.home) if (problem := loose_permissions(path))]
    if on_read_only_file_system(root):
        text = f"{root} is on a read-only file system: {READ_ONLY_HOME}."
        return [Finding("warn", "home", text), *(Finding("warn", "permissions", text) for text in loose)]
    if not os.access(root, os.W_OK | os.X_OK):
        return [
            Finding(
                "fail",
                "home",
                f"{root} is not writable for you; fix: chmod u+rwx {root}, or point HERALD_HOME elsewhere.",
            )
        ]
    if loose:
        return [Finding("warn", "permissions", problem) for problem in loose]
    return [Finding("ok", "home", f"{root} is private and writable.")]


async def check_config(ctx: DoctorContext) -> list[Finding]:
    path = ctx.home.config_path
    try:
        ctx.config = load_config(path)
    except ConfigError as error:
        return [
            Finding(
                "fail", "config", f"{error}\n  Fix the file, or set a value: herald config set KEY VALUE."
            )
        ]
    if not path.exists():
        return [Finding("ok", "config", f"{path} does not exist: every setting has its default.")]
    return [Finding("ok", "config", f"{path} is valid.")]


def _providers(config: HeraldConfig) -> list[str]:
    """The providers the configuration uses: the model's, and the summary model's if different."""
    auxiliary = config.auxiliary.compression.provider
    return list(dict.fromkeys([config.model.provider, *([auxiliary] if auxiliary else [])]))


async def check_keys(ctx: DoctorContext) -> list[Finding]:
    """API keys for the configured providers, in the environment or in ``.env`` (loaded here)."""
    try:
        load_env(ctx.home, ctx.environ)
    except OSError as error:
        return [Finding("fail", "keys", f"cannot read {ctx.home.env_path}: {describe_os_error(error)}")]
    if ctx.config is None:
        return [Finding("skip", "keys", "not checked: config.yaml is invalid (see above).")]
    findings = []
    checked: set[str] = set()
    for provider in _providers(ctx.config):
        variable = key_variable(ctx.config, provider)
        checked.add(variable)
        if ctx.environ.get(variable):
            findings.append(Finding("ok", "keys", f"{variable} is set for {provider}."))
        else:
            findings.append(Finding("fail", "keys", str(missing_key_error(provider, variable))))
    for index, fallback in enumerate(fallback_keys(ctx.config)):
        variable = fallback.api_key_env or key_variable(ctx.config, fallback.provider)
        if variable in checked:  # the same key as the model's: said above
            continue
        checked.add(variable)
        if ctx.environ.get(variable):
            findings.append(Finding("ok", "keys", f"{variable} is set for fallback {fallback.model}."))
        else:
            missing = missing_key_error(fallback.provider, variable)
            text = f"model.fallbacks[{index}] ({fallback.model}): {missing}"
            findings.append(Finding("fail", "keys", text))
    stt = ctx.config.stt
    if stt.provider is not None:
        if ctx.environ.get(stt.api_key_env):
            findings.append(
                Finding("ok", "keys", f"{stt.api_key_env} is set for speech-to-text ({stt.model}).")
            )
        elif stt_api_key(ctx.config, ctx.environ) is not None:
            text = f"speech-to-text at {stt.base_url} gets no key ({stt.api_key_env} is not set)."
            findings.append(Finding("ok", "keys", text))
        else:
            findings.append(Finding("fail", "keys", missing_stt_key(ctx.config, str(ctx.home.env_path))))
    return findings + _speech_key(ctx, ctx.config)


def _speech_key(ctx: DoctorContext, config: HeraldConfig) -> list[Finding]:
    """The key of the openai speech service spoken replies use (edge needs none)."""
    tts = config.tts
    if tts.provider != "openai" or tts.mode == "off":
        return []
    if ctx.environ.get(tts.api_key_env):
        return [Finding("ok", "keys", f"{tts.api_key_env} is set for spoken replies ({tts.model}).")]
    if tts_api_key(config, ctx.environ) is not None:
        text = f"spoken replies at {tts.base_url} get no key ({tts.api_key_env} is not set)."
        return [Finding("ok", "keys", text)]
    return [Finding("fail", "keys", missing_tts_key(config, str(ctx.home.env_path)))]


async def check_api_keys(ctx: DoctorContext) -> list[Finding]:
    """The OpenAI-compatible API's keys resolve and are strong enough, as the gateway's start requires
    (with ``bots:`` checked once here, each key with the bot it names)."""
    from gateway.openai_api.keys import key_ring  # hashlib only; keeps doctor's imports light

    if ctx.config is None or not ctx.config.api.keys:
        return []
    load_env(ctx.home, ctx.environ)
    try:
        key_ring(ctx.config.api.keys, ctx.home, ctx.environ)
    except ConfigError as error:
        return [Finding("fail", "api", str(error))]
    bots = sorted({key.bot for key in ctx.config.api.keys if key.bot is not None})
    whose = f" (bots {', '.join(bots)})" if bots else ""
    return [Finding("ok", "api", f"{len(ctx.config.api.keys)} API key(s) set{whose}.")]


def default_checks() -> list[Check]:
    from gateway.doctor.cluster import check_redis  # these build on this module's findings
    from gateway.doctor.provider import check_provider
    from gateway.doctor.storage import check_storage

    return [check_home, check_config, check_storage, check_redis, check_keys, check_api_keys, check_provider]


async def run_doctor(
    home: HeraldHome,
    *,
    offline: bool,
    out: TextIO,
    checks: Sequence[Check] | None = None,
    environ: dict[str, str] | None = None,
) -> int:
    """Run ``checks`` (default: :func:`default_checks`), print one line per finding; the exit code."""
    ctx = DoctorContext(home=home, environ=dict(os.environ if environ is None else environ), offline=offline)
    chosen = default_checks() if checks is None else checks
    problems = 0
    for finding in await _findings(ctx, chosen):
        out.write(f"{MARKS[finding.status]} {finding.subject}: {finding.text}\n")
        problems += finding.status in PROBLEMS
    for finding in await _bots_findings(ctx, chosen):
        out.write(f"{MARKS[finding.status]} {finding.subject}: {finding.text}\n")
        problems += finding.status in PROBLEMS
    out.write(
        "All checks passed.\n" if not problems else f"{problems} problem(s): see above for how to fix each.\n"
    )
    out.flush()
    return EXIT_OK if not problems else EXIT_FAILED


async def _findings(ctx: DoctorContext, checks: Sequence[Check]) -> list[Finding]:
    found: list[Finding] = []
    for check in checks:
        try:
            found += await check(ctx)
        except Exception as error:  # a broken check must not hide the others
            name = check.__name__.removeprefix("check_")
            found.append(Finding("fail", name, f"the check failed: {type(error).__name__}: {error}"))
    return found


BOT_SKIPS = ("check_home", "check_config", "check_api_keys")  # the home, its file, its keys: checked once


async def _bots_findings(ctx: DoctorContext, checks: Sequence[Check]) -> list[Finding]:
    """With ``bots:``, the checks again for each bot, on its settings, tokens and state (its lines
    prefixed ``bot NAME``): a bot's database, model key, platform tokens and MCP servers are its own."""
    from gateway.bots.profiles import bot_environ, bot_home, require_platform  # they open nothing

    if ctx.config is None or not ctx.config.bots:
        return []
    load_env(ctx.home, ctx.environ)  # the bots' tokens may be kept in .env
    found: list[Finding] = []
    for name, settings in ctx.config.bots.items():
        subject = f"bot {name}"
        try:
            environ = bot_environ(ctx.environ, settings.tokens, ctx.home, name)
            config = ctx.config.bot(name)
            require_platform(name, environ, config)
        except ConfigError as error:
            found.append(Finding("fail", f"{subject} tokens", str(error)))
            continue
        home = bot_home(ctx.home, name, settings.profile)
        bot = DoctorContext(home, environ, ctx.offline, config=config, timeout=ctx.timeout)
        chosen = [check for check in checks if check.__name__ not in BOT_SKIPS]
        found += [Finding(f.status, f"{subject} {f.subject}", f.text) for f in await _findings(bot, chosen)]
    return found
