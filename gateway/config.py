"""``config.yaml``: the schema, validation at start-up, and dotted-key get/set.

Validation errors name the key, the value found and what is allowed, so an operator can fix the file
without reading code. ``set_value`` edits the YAML in place (comments survive) and refuses to write a
value that would make the file invalid.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from agent.models import ModelInfo, lookup_model, with_context_length


class ConfigError(Exception):
    """Configuration that cannot be used; the message says what to fix."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSettings(_Section):
    provider: Literal["anthropic", "openai"] = "anthropic"
    name: str = Field("claude-sonnet-4-6", min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    context_length: int | None = Field(None, gt=1000)
    max_tokens: int = Field(4096, ge=1, le=200_000)
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    retry_base_delay: float = Field(1.0, ge=0)


class PromptCachingSettings(_Section):
    cache_ttl: Literal["5m", "1h", "auto"] = "auto"
    policy: Literal["layered", "system_and_3"] = "layered"


class CompressionSettings(_Section):
    enabled: bool = True
    threshold: float = Field(0.50, gt=0, lt=1)
    target_ratio: float = Field(0.20, gt=0, lt=1)
    protect_last_n: int = Field(20, ge=1)
    hygiene_threshold: float = Field(0.85, gt=0, le=1)


class AuxiliaryModelSettings(_Section):
    provider: Literal["anthropic", "openai"] | None = None
    model: str | None = None
    base_url: str | None = None


class AuxiliarySettings(_Section):
    compression: AuxiliaryModelSettings = AuxiliaryModelSettings()


class ContextSettings(_Section):
    engine: Literal["compressor"] = "compressor"


class MemorySettings(_Section):
    memory_char_limit: int = Field(2200, ge=100)
    user_char_limit: int = Field(1375, ge=100)


class AgentSection(_Section):
    system_message: str = ""
    max_iterations: int = Field(30, ge=1, le=500)
    toolsets: list[Literal["memory", "session_search", "skills", "todo"]] = [
        "memory",
        "session_search",
        "skills",
        "todo",
    ]
    project_context: bool = True


class ModelOverride(_Section):
    context_length: int | None = Field(None, gt=1000)
    min_cache_tokens: int | None = Field(None, ge=0)
    input: float | None = Field(None, ge=0)
    output: float | None = Field(None, ge=0)
    cache_write_5m: float | None = Field(None, ge=0)
    cache_write_1h: float | None = Field(None, ge=0)
    cache_read: float | None = Field(None, ge=0)


class HeraldConfig(_Section):
    model: ModelSettings = ModelSettings()
    prompt_caching: PromptCachingSettings = PromptCachingSettings()
    compression: CompressionSettings = CompressionSettings()
    auxiliary: AuxiliarySettings = AuxiliarySettings()
    context: ContextSettings = ContextSettings()
    memory: MemorySettings = MemorySettings()
    agent: AgentSection = AgentSection()
    models: dict[str, ModelOverride] = {}

    def model_info(self, name: str | None = None) -> ModelInfo:
        """Table entry for ``name`` (default: the configured model) with config overrides applied."""
        name = name or self.model.name
        base = lookup_model(name)
        override = self.models.get(name)
        if override is not None:
            values = {k: v for k, v in override.model_dump().items() if v is not None}
            base = ModelInfo(**{**base.__dict__, **values})
        return with_context_length(base, self.model.context_length)


def format_validation_error(error: ValidationError, source: str) -> str:
    lines = [f"{source} has {error.error_count()} invalid setting(s):"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            lines.append(f"  - {key}: unknown key (check the spelling; see config/config.yaml for every key)")
        else:
            lines.append(f"  - {key} = {item.get('input')!r}: {item['msg']}")
    return "\n".join(lines)


def validate(data: object, source: str) -> HeraldConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must be a mapping of settings, found {type(data).__name__}.")
    try:
        return HeraldConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source)) from None


def load_config(path: Path) -> HeraldConfig:
    """Read and validate ``path``; a missing file means all defaults."""
    if not path.exists():
        return HeraldConfig()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return validate(data, str(path))


def get_value(config: HeraldConfig, key: str) -> Any:
    """The effective value (defaults included) at a dotted key."""
    value: Any = config.model_dump(mode="json")
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"unknown key '{key}' (no '{part}' there)")
        value = value[part]
    return value


def _round_trip() -> YAML:
    handler = YAML()
    handler.preserve_quotes = True
    handler.indent(mapping=2, sequence=4, offset=2)
    return handler


def set_value(path: Path, key: str, raw: str) -> HeraldConfig:
    """Set ``key`` to ``raw`` (parsed as a YAML scalar) in ``path``; comments and order survive.

    The whole file is validated with the new value before anything is written.
    """
    handler = _round_trip()
    document = handler.load(path.read_text(encoding="utf-8")) if path.exists() else None
    if document is None:
        document = CommentedMap()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    parts = key.split(".")
    node = document
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = CommentedMap()
            node[part] = child
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set '{key}': '{part}' holds a value, not a section")
        node = child
    node[parts[-1]] = value
    plain = yaml.safe_load(_dump(handler, document))
    config = validate(plain, f"{path} (after setting {key})")
    _atomic_write(path, _dump(handler, document))
    return config


def _dump(handler: YAML, document: Any) -> str:
    buffer = io.StringIO()
    handler.dump(document, buffer)
    return buffer.getvalue()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
