"""The speech service ``tts`` names, built once at start-up (its SDK imported only then).

As for speech to text: OpenAI's own service needs a key (a missing one stops the start with a line that
says where to put it, and ``herald doctor`` says the same); a server of your own at ``tts.base_url``
gets the placeholder ``no-key`` when none is set. Edge needs no key.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.api import EdgeSynthesizer, OpenAISynthesizer, RetryPolicy, Synthesizer
from gateway.config import ConfigError, HeraldConfig

LOCAL_TTS_KEY = "no-key"  # sent to a server at tts.base_url when no key is set: the SDK needs one
SPEECH_RETRIES = 2  # a voice note is worth a short wait, not the model's patience: the text is there


def tts_api_key(config: HeraldConfig, environ: Mapping[str, str]) -> str | None:
    """The key the openai speech service is sent; None when OpenAI's own would be called without one."""
    tts = config.tts
    return environ.get(tts.api_key_env) or (LOCAL_TTS_KEY if tts.base_url else None)


def missing_tts_key(config: HeraldConfig, where: str) -> str:
    """What to do about speech configured for OpenAI's service with no key (``where``: the .env)."""
    tts = config.tts
    return (
        f"tts.provider is openai but {tts.api_key_env} is not set: put the key in the environment or in "
        f"{where} (or set tts.base_url to a speech server of your own, which needs none; or tts.provider: "
        "edge, which needs none; or tts.provider: null for text answers only)."
    )


def make_synthesizer(config: HeraldConfig, environ: Mapping[str, str]) -> Synthesizer | None:
    """The configured speech service; None when answers are never spoken (no provider, or mode off)."""
    tts = config.tts
    if tts.provider is None or tts.mode == "off":
        return None
    if tts.provider == "edge":
        return EdgeSynthesizer(
            voice=tts.voice, timeout=tts.timeout, price_per_million_chars=tts.price_per_million_chars
        )
    api_key = tts_api_key(config, environ)
    if api_key is None:
        raise ConfigError(missing_tts_key(config, ".env in your Herald home"))
    return OpenAISynthesizer(
        model=tts.model,
        voice=tts.voice,
        api_key=api_key,
        base_url=tts.base_url,
        timeout=tts.timeout,
        price_per_million_chars=tts.price_per_million_chars,
    )


def speech_retries(config: HeraldConfig) -> RetryPolicy:
    """Retries of one synthesis (429, 5xx, a dropped connection), all within ``tts.timeout``."""
    tries = min(SPEECH_RETRIES, config.model.max_retries)
    return RetryPolicy(max_retries=tries, base_delay=config.model.retry_base_delay)
