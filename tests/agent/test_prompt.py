"""Prompt assembly is pure and deterministic, and per-chat data never reaches the stable layer."""

from __future__ import annotations

import dataclasses
import datetime as dt

from agent.prompt import DEFAULT_IDENTITY, PromptInputs, SystemPrompt, build_system_prompt, format_start_date

INPUTS = PromptInputs(
    identity="You are Testbot.",
    tool_guidance=("memory: save durable facts.", "todo: plan multi-step work."),
    skills_index="# Skills\n- deploy: ship it",
    platform_hint="You are talking with the user in a terminal.",
    system_message="Answer in English.",
    project_context="# Project context (from AGENTS.md)\n\nUse tabs.",
    memory_snapshot="## MEMORY.md [1% — 20/2,200 chars]\nuser likes tea",
    started_on=dt.date(2026, 11, 22),
    model="claude-sonnet-4-5",
    provider="anthropic",
)


def test_same_inputs_give_the_same_bytes() -> None:
    assert build_system_prompt(INPUTS).to_json() == build_system_prompt(INPUTS).to_json()


def test_layers_hold_what_the_architecture_says() -> None:
    prompt = build_system_prompt(INPUTS)
    assert prompt.stable.startswith("You are Testbot.")
    assert "memory: save durable facts." in prompt.stable and "deploy: ship it" in prompt.stable
    assert "terminal" in prompt.stable
    assert prompt.context.startswith("Answer in English.") and "Use tabs." in prompt.context
    assert "user likes tea" in prompt.volatile
    assert "Conversation started: Sunday, November 22, 2026" in prompt.volatile
    assert "claude-sonnet-4-5 (provider: anthropic)" in prompt.volatile


def test_chat_context_and_dates_only_change_the_volatile_layer() -> None:
    base = build_system_prompt(INPUTS)
    other = build_system_prompt(
        dataclasses.replace(INPUTS, chat_context="Chat: Family group", started_on=dt.date(2026, 11, 23))
    )
    assert other.stable == base.stable and other.context == base.context
    assert other.volatile != base.volatile and "Family group" in other.volatile


def test_a_clients_instructions_only_change_the_context_layer_after_the_configured_message() -> None:
    base = build_system_prompt(INPUTS)
    other = build_system_prompt(dataclasses.replace(INPUTS, instructions="Answer in French."))
    assert other.stable == base.stable and other.volatile == base.volatile
    assert other.context.startswith(base.context)
    assert other.context.endswith("chat application\n\nAnswer in French.")


def test_date_has_no_time_of_day() -> None:
    assert format_start_date(dt.date(2026, 1, 5)) == "Conversation started: Monday, January 5, 2026"


def test_empty_identity_falls_back_and_empty_layers_are_omitted() -> None:
    prompt = build_system_prompt(
        dataclasses.replace(INPUTS, identity="  ", system_message="", project_context="")
    )
    assert prompt.stable.startswith(DEFAULT_IDENTITY.strip())
    assert [name for name, _ in prompt.layers()] == ["stable", "volatile"]


def test_round_trips_through_json() -> None:
    prompt = build_system_prompt(INPUTS)
    assert SystemPrompt.from_json(prompt.to_json()) == prompt
