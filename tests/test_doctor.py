"""`herald doctor`: each problem of a home with what is wrong and how to fix it; exit 0 only when all
is fine. It changes nothing, so it is safe on a damaged home."""

from __future__ import annotations

import io

import pytest

from gateway.config import HeraldConfig
from gateway.doctor import (
    DoctorContext,
    Finding,
    check_home,
    check_keys,
    default_checks,
    run_doctor,
    status_finding,
)
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.helpers import point_at


def test_a_healthy_home_passes(emulator: ProviderEmulator, served: str, home: HeraldHome, herald) -> None:
    point_at(home, served)
    herald("chat", "-q", "hi")  # a real database to check
    result = herald("doctor")
    assert result.returncode == 0, result.stdout
    assert result.stdout.endswith("All checks passed.\n")
    for subject in ("home", "config", "database", "keys", "provider"):
        assert f"[ok]   {subject}: " in result.stdout
    assert f"{served} is reachable" in result.stdout


@pytest.mark.sqlite_itself  # a damaged state.db
def test_problems_are_listed_with_what_to_do(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    home.db_path.write_bytes(b"garbage" * 1000)
    home.db_path.chmod(0o600)
    before = sorted(p.name for p in home.root.iterdir())
    result = herald("doctor", "--offline")
    assert result.returncode == 1
    assert (
        f"[FAIL] database: {home.db_path} is damaged (file is not a database); to start fresh:"
        in result.stdout
    )
    assert "[FAIL] keys: No API key for anthropic: set ANTHROPIC_API_KEY" in result.stdout
    assert "[skip] provider: not checked (--offline)." in result.stdout
    assert result.stdout.endswith("2 problem(s): see above for how to fix each.\n")
    assert sorted(p.name for p in home.root.iterdir()) == before  # doctor changed nothing


def test_an_invalid_config_is_reported_and_what_depends_on_it_skipped(home: HeraldHome, herald) -> None:
    home.config_path.write_text("model:\n  provider: antropic\n")
    result = herald("doctor")
    assert result.returncode == 1
    assert "[FAIL] config: " in result.stdout and "model.provider = 'antropic'" in result.stdout
    assert "[skip] keys: not checked: config.yaml is invalid" in result.stdout
    assert "[skip] provider: not checked: config.yaml is invalid" in result.stdout


def test_an_unreachable_provider_fails_with_what_to_check(home: HeraldHome, herald) -> None:
    point_at(home, "http://127.0.0.1:9")  # nothing listens on the discard port
    result = herald("doctor")
    assert result.returncode == 1
    assert "[FAIL] provider: cannot reach http://127.0.0.1:9" in result.stdout
    assert "`herald doctor --offline`" in result.stdout


def test_an_openai_endpoint_without_v1_gets_a_hint(
    served: str, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    herald("config", "set", "model.provider", "openai")
    herald("config", "set", "model.name", "gpt-5")
    monkeypatch.setenv("OPENAI_BASE_URL", served)
    result = herald("doctor")
    assert result.returncode == 1
    assert f"try OPENAI_BASE_URL={served}/v1" in result.stdout


def test_status_answers_are_explained() -> None:
    assert (
        status_finding("anthropic", "https://x", 401).text
        == "https://x refused the API key (HTTP 401); check the key."
    )
    assert status_finding("anthropic", "https://x", 529).status == "warn"
    assert status_finding("openai", "https://x/v1", 404).status == "ok"


async def test_more_checks_plug_in_and_a_broken_check_hides_nothing(home: HeraldHome) -> None:
    """The seam the gateway uses for its platform-token checks."""

    async def check_tokens(ctx: DoctorContext) -> list[Finding]:
        return [Finding("fail", "telegram", "the bot token was refused; get a new one from @BotFather.")]

    async def check_broken(ctx: DoctorContext) -> list[Finding]:
        raise RuntimeError("boom")

    out = io.StringIO()
    code = await run_doctor(home, offline=True, out=out, checks=[check_home, check_broken, check_tokens])
    assert code == 1
    assert out.getvalue().splitlines() == [
        f"[ok]   home: {home.root} is private and writable.",
        "[FAIL] broken: the check failed: RuntimeError: boom",
        "[FAIL] telegram: the bot token was refused; get a new one from @BotFather.",
        "2 problem(s): see above for how to fix each.",
    ]
    assert [check.__name__ for check in default_checks()] == [
        "check_home",
        "check_config",
        "check_storage",
        "check_redis",
        "check_keys",
        "check_provider",
    ]


def test_speech_to_text_without_its_key_is_a_problem_with_the_fix(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.config_path.write_text("stt:\n  provider: openai\n  api_key_env: WHISPER_KEY\n")
    result = herald("doctor", "--offline")
    assert result.returncode == 1
    assert "[FAIL] keys: stt.provider is openai but WHISPER_KEY is not set" in result.stdout
    monkeypatch.setenv("WHISPER_KEY", "secret-value")
    result = herald("doctor", "--offline")
    assert "[ok]   keys: WHISPER_KEY is set for speech-to-text (whisper-1)." in result.stdout
    assert "secret-value" not in result.stdout


@pytest.mark.own_database  # states of a PostgreSQL of its own
def test_doctor_checks_the_postgresql_it_is_configured_for_without_printing_credentials(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch, postgresql_database: str
) -> None:
    from tests.conftest import postgres_server

    server = postgres_server()
    name = postgresql_database.rsplit("/", 1)[1]
    server.sql(name, "CREATE ROLE bot LOGIN PASSWORD 'sesame'")
    with_password = postgresql_database.replace("herald@", "herald:sesame@")
    monkeypatch.setenv("DB_URL", with_password)
    home.config_path.write_text("storage:\n  url: $DB_URL\n")
    result = herald("doctor", "--offline")
    assert "[ok]   database: postgresql://herald:***@127.0.0.1:" in result.stdout
    assert "answers: PostgreSQL 1" in result.stdout and "has this Herald's schema (revision" in result.stdout
    assert "may create and change Herald's tables" in result.stdout
    assert "sesame" not in result.stdout + result.stderr

    server.sql(name, "GRANT CONNECT ON DATABASE " + name + " TO bot")
    as_bot = postgresql_database.replace("herald@", "bot:sesame@")
    monkeypatch.setenv("DB_URL", as_bot)
    result = herald("doctor", "--offline")
    assert result.returncode == 1, result.stdout
    assert "[FAIL] database: the user of postgresql://bot:***@" in result.stdout, result.stdout
    assert "lacks CREATE in schema public" in result.stdout and "SELECT on " in result.stdout
    assert "sesame" not in result.stdout + result.stderr


async def test_speech_to_text_at_a_server_of_your_own_needs_no_key(home: HeraldHome) -> None:
    stt = {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1"}
    config = HeraldConfig.model_validate({"stt": stt})
    context = DoctorContext(home, {"ANTHROPIC_API_KEY": "k"}, offline=True, config=config)
    findings = [f for f in await check_keys(context) if "speech-to-text" in f.text]
    assert [(f.status, f.text) for f in findings] == [
        ("ok", "speech-to-text at http://127.0.0.1:8000/v1 gets no key (OPENAI_API_KEY is not set).")
    ]
