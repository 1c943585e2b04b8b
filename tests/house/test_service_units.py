"""The systemd units under ``systemd/`` are what ``gateway.cli.units`` renders, and the template unit's
per-instance options are ones ``herald gateway run`` takes."""

from __future__ import annotations

import shlex

import pytest

from gateway.cli.gateway import with_run_options
from gateway.cli.grammar import build_parser
from gateway.cli.units import (
    DOC_SYSTEM,
    DOC_USER,
    TEMPLATE_UNIT_NAME,
    UNIT_NAME,
    render_system_unit,
    render_template_unit,
    render_user_unit,
)
from gateway.config import ConfigError, HeraldConfig
from gateway.config_doc import REPO_ROOT

UNITS = REPO_ROOT / "systemd"


def test_the_committed_units_are_the_rendered_ones() -> None:
    assert (UNITS / UNIT_NAME).read_text() == render_system_unit(**DOC_SYSTEM)
    assert (UNITS / "herald-gateway.user.service").read_text() == render_user_unit(**DOC_USER)
    assert (UNITS / TEMPLATE_UNIT_NAME).read_text() == render_template_unit(**DOC_SYSTEM)


def test_each_template_instance_is_its_own_cluster_member_on_its_own_port() -> None:
    unit = render_template_unit(**DOC_SYSTEM)
    [exec_start] = [
        line.removeprefix("ExecStart=") for line in unit.splitlines() if line.startswith("ExecStart=")
    ]
    instance = exec_start.replace("%H", "box1.example.org").replace("%i", "8788")  # what systemd substitutes
    args = build_parser().parse_args(shlex.split(instance)[1:])
    assert (args.command, args.gateway_command) == ("gateway", "run")
    config = with_run_options(HeraldConfig(), instance=args.instance, http_port=args.http_port)
    assert config.cluster.instance_id == "box1.example.org-8788"
    assert config.gateway.http_port == 8788
    unchanged = with_run_options(HeraldConfig(), instance=None, http_port=None)
    assert unchanged == HeraldConfig()


def test_run_options_keep_every_other_setting() -> None:
    config = HeraldConfig.model_validate({
        "storage": {"url": "$DATABASE_URL"},
        "cluster": {"redis_url": "$REDIS_URL", "leader_ttl": 5},
        "telegram": {"allowed_users": [42], "mode": "webhook", "webhook_url": "https://lb.example.org/tg"},
        "model": {"provider": "openai", "name": "gpt-5"},
    })  # fmt: skip
    changed = with_run_options(config, instance="box1-8787", http_port=8787)
    expected = config.model_copy(
        update={
            "cluster": config.cluster.model_copy(update={"instance_id": "box1-8787"}),
            "gateway": config.gateway.model_copy(update={"http_port": 8787}),
        }
    )
    assert changed == expected


def test_a_bad_instance_name_on_the_command_line_is_refused() -> None:
    with pytest.raises(ConfigError, match="instance_id"):
        with_run_options(HeraldConfig(), instance="no spaces please", http_port=None)
