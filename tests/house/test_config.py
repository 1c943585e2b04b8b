"""Config validation names the key and what is allowed; `config set` keeps comments and refuses bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, HeraldConfig, get_value, load_config, set_value
from gateway.config_doc import REPO_ROOT, render_config_yaml, render_settings_table, settings
from gateway.home import HeraldHome, ensure_home


def test_default_config_file_is_valid_and_matches_the_schema_defaults(tmp_path: Path) -> None:
    home = HeraldHome(tmp_path)
    ensure_home(home)
    assert load_config(home.config_path) == HeraldConfig()


def test_invalid_value_is_reported_with_key_and_allowed_values(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  provider: antropic\ncompression:\n  threshold: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "model.provider = 'antropic'" in message and "'anthropic' or 'openai'" in message
    assert "compression.threshold = 2" in message and "less than 1" in message


def test_too_few_redis_connections_for_the_listeners_are_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("cluster:\n  redis_connections: 4\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "cluster.redis_connections = 4: must be at least 5" in message
    assert "the work queue's blocking read" in message


def test_unknown_key_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  nmae: x\n")
    with pytest.raises(ConfigError, match=r"model\.nmae: unknown key"):
        load_config(path)


def test_broken_yaml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_set_keeps_comments_and_validates(tmp_path: Path) -> None:
    home = HeraldHome(tmp_path)
    ensure_home(home)
    set_value(home.config_path, "compression.threshold", "0.6")
    set_value(home.config_path, "model.context_length", "64000")
    text = home.config_path.read_text()
    assert "# In-loop compression when the prompt reaches this share of the window." in text
    config = load_config(home.config_path)
    assert config.compression.threshold == 0.6 and config.model.context_length == 64000
    assert get_value(config, "compression.threshold") == 0.6


def test_set_refuses_an_invalid_value_and_leaves_the_file_alone(tmp_path: Path) -> None:
    home = HeraldHome(tmp_path)
    ensure_home(home)
    before = home.config_path.read_text()
    with pytest.raises(ConfigError, match=r"prompt_caching\.cache_ttl"):
        set_value(home.config_path, "prompt_caching.cache_ttl", "2h")
    assert home.config_path.read_text() == before


def test_fallback_models_are_set_as_a_list_and_neither_repeat_nor_stand_in_for_themselves(
    tmp_path: Path,
) -> None:
    home = HeraldHome(tmp_path)
    ensure_home(home)
    mini = "[{provider: openai, name: gpt-5-mini, api_key_env: MINI}]"
    set_value(home.config_path, "model.fallbacks", mini)
    [fallback] = load_config(home.config_path).model.fallbacks
    assert (fallback.provider, fallback.name, fallback.base_url, fallback.api_key_env) == (
        "openai",
        "gpt-5-mini",
        None,
        "MINI",
    )
    refusals = {
        "[{provider: anthropic, name: claude-sonnet-4-6}]": "entry 0 is the model itself (claude-sonnet-4-6)",
        "[{provider: openai, name: x}, {provider: openai, name: x}]": "entry 1 (x) is listed twice",
        "[{provider: openai, nmae: x}]": "model.fallbacks.0.nmae: unknown key",
        "[{provider: mistral, name: x}]": "'anthropic' or 'openai'",
    }
    before = home.config_path.read_text()
    for value, reason in refusals.items():
        with pytest.raises(ConfigError) as info:
            set_value(home.config_path, "model.fallbacks", value)
        assert reason in str(info.value), str(info.value)
    assert home.config_path.read_text() == before


def test_get_unknown_key_says_so() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'model\.colour'"):
        get_value(HeraldConfig(), "model.colour")


def test_model_overrides_and_context_length(tmp_path: Path) -> None:
    config = HeraldConfig.model_validate(
        {"model": {"name": "local-llm", "context_length": 32000}, "models": {"local-llm": {"input": 0.0}}}
    )
    info = config.model_info()
    assert info.context_length == 32000 and info.input == 0.0


def test_setup_never_overwrites_user_files(tmp_path: Path) -> None:
    home = HeraldHome(tmp_path)
    home.root.mkdir(exist_ok=True)
    home.soul_path.write_text("I am custom.")
    created = ensure_home(home)
    assert home.soul_path.read_text() == "I am custom."
    assert home.config_path in created and home.soul_path not in created
    assert ensure_home(home) == []


def test_example_config_and_settings_page_table_are_generated_from_the_schema() -> None:
    """config/config.yaml and the settings table of docs/config.md are exactly what the schema renders.

    After changing a setting, run `python -m gateway.config_doc` to regenerate both.
    """
    assert (REPO_ROOT / "config" / "config.yaml").read_text() == render_config_yaml()
    assert render_settings_table() in (REPO_ROOT / "docs" / "config.md").read_text()


def test_every_setting_is_documented_and_the_example_file_loads_as_the_defaults(tmp_path: Path) -> None:
    missing = [setting.key for setting in settings() if not setting.description]
    assert missing == []
    path = tmp_path / "config.yaml"
    path.write_text(render_config_yaml())
    assert load_config(path) == HeraldConfig()
    assert {s.key for s in settings()} >= {"compression.hygiene_min_messages", "agent.context_dir"}


def test_numbers_are_not_booleans(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  max_tokens: true\n  timeout: yes\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "model.max_tokens = True" in str(info.value) and "model.timeout = True" in str(info.value)


def test_set_takes_text_as_is_for_a_text_key(home: HeraldHome, herald) -> None:
    """A value is read by the key's type: YAML made "a: b" a mapping, yes a boolean and "# x" null."""
    for text in ("Answer in French: always.", "yes", "# x", "[not a list]"):
        result = herald("config", "set", "agent.system_message", text)
        assert (result.returncode, result.stdout) == (0, f"agent.system_message = {text}\n"), result.stderr
        assert herald("config", "get", "agent.system_message").stdout == f"{text}\n"
        assert load_config(home.config_path).agent.system_message == text
    assert herald("config", "set", "model.base_url", "null").stdout == "model.base_url = null\n"


def test_set_reads_numbers_booleans_and_lists_by_type(home: HeraldHome, herald) -> None:
    assert herald("config", "set", "compression.enabled", "false").stdout == "compression.enabled = false\n"
    assert herald("config", "get", "compression.enabled").stdout == "false\n"  # printed alike
    assert herald("config", "set", "agent.toolsets", '["memory", "todo"]').returncode == 0
    assert herald("config", "set", "agent.toolsets", "[memory, skills]").stdout == (
        'agent.toolsets = ["memory", "skills"]\n'
    )
    refused = herald("config", "set", "model.max_tokens", "true")
    assert (
        refused.returncode == 2
        and "model.max_tokens = True: Input should be a valid integer" in refused.stderr
    )
    broken = herald("config", "set", "agent.toolsets", "[memory")
    assert broken.returncode == 2 and "is not valid YAML or JSON" in broken.stderr


def test_set_on_a_broken_file_reports_it_like_get(home: HeraldHome, herald) -> None:
    home.config_path.write_text("model: [unclosed\n")
    got = herald("config", "get", "model.name")
    put = herald("config", "set", "model.name", "x")
    assert got.returncode == put.returncode == 2
    assert "is not valid YAML" in put.stderr and put.stderr == got.stderr
    assert home.config_path.read_text() == "model: [unclosed\n"


def test_set_before_setup_installs_the_commented_default_file(tmp_path: Path, herald, monkeypatch) -> None:
    fresh = HeraldHome(tmp_path / "fresh")
    monkeypatch.setenv("HERALD_HOME", str(fresh.root))
    assert herald("config", "set", "model.name", "claude-opus-4-1").returncode == 0
    text = fresh.config_path.read_text()
    assert text.startswith("# Herald configuration.") and "name: claude-opus-4-1" in text
    assert "# Maximum tokens per answer." in text


def test_a_storage_url_herald_cannot_use_is_refused_at_set_at_load_and_by_doctor(
    home: HeraldHome, herald
) -> None:
    """One rule (the schema's) everywhere: before, `set` wrote it, doctor called the file valid, and only
    opening the database failed."""
    before = home.config_path.read_text()
    refused = herald("config", "set", "storage.url", "mysql://herald:secret@db/herald")
    assert refused.returncode == 2 and home.config_path.read_text() == before
    assert "storage.url = 'mysql://herald:***@db/herald': storage.url uses 'mysql'" in refused.stderr
    assert "secret" not in refused.stderr
    assert herald("config", "set", "storage.url", "postgresql://herald@db/herald").returncode == 0

    home.config_path.write_text("storage:\n  url: mysql://x\n")
    got = herald("config", "get", "model.name")
    assert got.returncode == 2 and "storage.url uses 'mysql'; Herald stores its state in SQLite" in got.stderr
    doctor = herald("doctor", "--offline")
    assert doctor.returncode == 1
    assert "[FAIL] config: " in doctor.stdout and "storage.url uses 'mysql'" in doctor.stdout


def test_a_key_given_twice_is_refused_with_both_its_lines(home: HeraldHome, herald, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  name: claude-opus-4-1\n  max_tokens: 900\n  name: gpt-5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: the key model.name is given twice (lines 2 and 4); keep one of them."

    home.config_path.write_text("model:\n  name: gpt-5\nagent:\n  max_turns: 5\nmodel:\n  timeout: 3\n")
    before = home.config_path.read_text()
    for command in (("config", "get", "model.name"), ("config", "set", "model.name", "x"), ("insights",)):
        result = herald(*command)
        assert result.returncode == 2, (command, result)
        assert "the key model is given twice (lines 1 and 5)" in result.stderr, (command, result.stderr)
    assert home.config_path.read_text() == before
    doctor = herald("doctor", "--offline")
    assert "[FAIL] config: " in doctor.stdout and "the key model is given twice" in doctor.stdout

    home.config_path.write_text("")
    value = herald("config", "set", "models", "{my-model: {input: 1}, my-model: {input: 2}}")
    assert value.returncode == 2 and "the key my-model is given twice (both on line 1)" in value.stderr
