"""Starting a session: gather the prompt's sources, build the prompt and tool list once, store them.

This is the only place a session's system prompt is built. Every later request of the session —
after restarts, compression, from sub-agents — reads the stored bytes instead.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path

from agent.context_files import load_project_context
from agent.files.text import read_text
from agent.memory import MemoryBank, MemorySnapshot
from agent.model.messages import Message
from agent.model.provider import ProviderRequest, estimate_input_tokens
from agent.prompt import DEFAULT_IDENTITY, PromptInputs, SystemPrompt, build_system_prompt
from agent.skills import SkillLibrary
from agent.store import NewSession, SessionRecord, SessionStore
from agent.tools.registry import ToolRegistry, tool_guidance, tools_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionSpec:
    """Who the session is for.

    ``memory_scope`` says whose memory the session reads and writes (``agent.memory``: the owner's, one
    person's, or a group chat's); it has no default on purpose, so no caller hands the owner's memory
    to a stranger by forgetting it. ``chat_context`` (a chat title, a member list) goes in the volatile
    layer; ``instructions`` (the system message a client of the OpenAI-compatible API sent) in the
    context layer. ``toolsets_left_out``: tool sets whose tools could never succeed where the session
    talks, left out of its tool list whatever the configuration grants (decided once: the list is
    stored with the session).
    """

    session_key: str
    source: str  # where it was started: a platform's name, "cron"
    platform: str  # the platform it talks on (a name, stored with the session)
    memory_scope: str
    chat_id: str | None = None
    user_id: str | None = None
    chat_context: str = ""
    platform_hint: str = ""  # how to write there (the platform's adapter says; stable prompt layer)
    instructions: str = ""
    toolsets_left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromptSources:
    """Where the prompt's parts come from (HERALD_HOME, memory and skills, the context directory, config).

    ``context_dir`` is where the project context file is looked up; None loads none (a daemon's
    working directory says nothing about the project it serves).
    """

    soul_path: Path
    skills: SkillLibrary
    memory: MemoryBank
    context_dir: Path | None
    system_message: str
    toolsets: tuple[str, ...]
    project_context: bool


@dataclass(frozen=True)
class StartedSession:
    record: SessionRecord
    warnings: tuple[str, ...]  # for the user: e.g. a project context file that was not loaded


def new_session_id(now: dt.datetime) -> str:
    return f"{now:%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def load_identity(path: Path) -> str:
    """SOUL.md's text (bad UTF-8 replaced); the built-in identity when it is missing, empty or unreadable."""
    try:
        text = read_text(path).strip()
    except OSError as exc:
        if path.exists():
            log.warning("cannot read %s (%s); using the built-in identity", path, exc)
        return DEFAULT_IDENTITY
    return text or DEFAULT_IDENTITY


def _read_files(sources: PromptSources) -> tuple[str, str, tuple[str, ...]]:
    """Blocking file reads, run in a thread: identity, project context, and a warning for the user
    about a project context file that was left out."""
    identity = load_identity(sources.soul_path)
    if not sources.project_context or sources.context_dir is None:
        return identity, "", ()
    project = load_project_context(sources.context_dir)
    return identity, project.text, (project.warning,) if project.warning else ()


async def _gather(sources: PromptSources, scope: str) -> tuple[str, str, str, str, tuple[str, ...]]:
    """Identity, skills index, project context, memory snapshot, and the warnings for the user about
    what was left out or cut."""
    identity, context_text, warnings = await asyncio.to_thread(_read_files, sources)
    skills = await sources.skills.index_text() if "skills" in sources.toolsets else ""
    snapshot = MemorySnapshot("")
    if "memory" in sources.toolsets:
        snapshot = await sources.memory.store(scope).snapshot()
    return identity, skills, context_text, snapshot.text, (*warnings, *snapshot.warnings)


async def start_session(
    store: SessionStore,
    registry: ToolRegistry,
    sources: PromptSources,
    spec: SessionSpec,
    *,
    provider: str,
    model: str,
    now: dt.datetime | None = None,
) -> StartedSession:
    now = now or dt.datetime.now().astimezone()
    identity, skills, project_text, snapshot, warnings = await _gather(sources, spec.memory_scope)
    tools = registry.enabled(sources.toolsets)
    prompt: SystemPrompt = build_system_prompt(
        PromptInputs(
            identity=identity,
            tool_guidance=tool_guidance(tools),
            skills_index=skills,
            platform_hint=spec.platform_hint,
            system_message=sources.system_message,
            project_context=project_text,
            memory_snapshot=snapshot,
            started_on=now.date(),
            model=model,
            provider=provider,
            chat_context=spec.chat_context,
            instructions=spec.instructions,
        )
    )
    record = await store.sessions.create(
        NewSession(
            id=new_session_id(now),
            session_key=spec.session_key,
            source=spec.source,
            platform=spec.platform,
            chat_id=spec.chat_id,
            user_id=spec.user_id,
            system_prompt=prompt,
            tools_json=tools_json(tools),
            provider=provider,
            model=model,
            memory_scope=spec.memory_scope,
        )
    )
    log.info("session %s started (%s, %s/%s)", record.id, spec.session_key, provider, model)
    return StartedSession(record=record, warnings=warnings)


def prompt_tokens_with(session: SessionRecord, text: str) -> int:
    """The estimated size of the smallest request of ``session`` that carries ``text`` as a user message:
    its stored prompt and tools and the message (the same ~4 characters a token as every estimate, so it
    agrees with hygiene and compression). History can be compressed away; this cannot: a message whose
    count is past the model's context window can never be sent."""
    request = ProviderRequest(
        session_id=session.id,
        system=session.system_prompt,
        tools=session.tools,
        messages=(Message(role="user", content=text),),
        max_tokens=0,
    )
    return estimate_input_tokens(request)
