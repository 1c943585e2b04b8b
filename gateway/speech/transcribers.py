"""Speech to text as ``stt`` names it, built once at start-up (the openai SDK imported only then).

OpenAI's own service needs a key: a missing one stops the start with a line that says where to put it,
and ``herald doctor`` says the same; a Whisper server of your own at ``stt.base_url`` gets the placeholder
``no-key`` when none is set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agent.api import RetryPolicy, Transcriber
from gateway.config import ConfigError, HeraldConfig

LOCAL_STT_KEY = "no-key"  # sent to a server at stt.base_url when no key is set: the SDK needs one


def stt_api_key(config: HeraldConfig, environ: Mapping[str, str]) -> str | None:
    """The key speech to text sends: ``stt.api_key_env``'s value; with none, :data:`LOCAL_STT_KEY` for
    a server of your own at ``stt.base_url`` (a local Whisper server asks for no key and ignores the
    one it gets); None when OpenAI's own service would be called without a key."""
    stt = config.stt
    return environ.get(stt.api_key_env) or (LOCAL_STT_KEY if stt.base_url else None)


def missing_stt_key(config: HeraldConfig, where: str) -> str:
    """What to do about speech to text configured for OpenAI's service with no key (``where``: .env)."""
    stt = config.stt
    return (
        f"stt.provider is {stt.provider} but {stt.api_key_env} is not set: put the key in the environment "
        f"or in {where} (or set stt.base_url to a Whisper server of your own, which needs none; or "
        "stt.provider: null to leave voice notes untranscribed)."
    )


def make_transcriber(config: HeraldConfig) -> Transcriber | None:
    """Speech to text from ``stt``; None when it is not configured. A missing key (for OpenAI's own
    service) is a start-up error."""
    stt = config.stt
    if stt.provider is None:
        return None
    api_key = stt_api_key(config, os.environ)
    if api_key is None:
        raise ConfigError(missing_stt_key(config, ".env in your Herald home"))
    from agent.api import OpenAITranscriber  # imports the openai SDK: only when configured

    return OpenAITranscriber(
        model=stt.model,
        api_key=api_key,
        base_url=stt.base_url,
        timeout=stt.timeout,
        language=stt.language,
        retry=RetryPolicy(max_retries=config.model.max_retries, base_delay=config.model.retry_base_delay),
        price_per_minute=stt.price_per_minute,
    )
