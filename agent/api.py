"""The agent's public surface for the gateway: what the gateway uses of the agent, and nothing more.

The gateway imports the agent only through its doors (``tests/house/test_layering.py`` holds it to them, and
holds this module to names the gateway uses):

- :mod:`agent.api` (this module), by role:

  - building the agent: :func:`open_agent` (``agent.assembly``: the pool and failover, the request cap,
    the spend gate, the cache watch, compression, the tool registry, the hands and MCP, fitted together
    from :class:`Models`, :class:`Spending`, :class:`Shared` and the config's agent sections;
    :class:`AssemblyError` when it cannot be);
  - sessions and turns: the :class:`Agent` and its :class:`TurnResult`, session specs and their start
    (prompt sources, the frozen memory), the store and its records, reviews and batching, the
    per-session locks and their leases;
  - events of a turn: text, tools, retries, failover, compression;
  - usage, spending and the cache: usage rows, cache-miss figures and causes, the request cap, the spend
    gate and its counters (a cluster's), charges, scopes, windows and refusals, the spend ledger,
    retention of the agent's rows;
  - media and speech: files a person sends (images, documents, voice notes) and their budgets,
    synthesizers for spoken replies;
  - tools and hands: the registry's vocabulary (tools, gates, MCP names), approvals and the tools'
    audit, the owner's hands (workspace, sandbox), the browser's and web search's checks for ``doctor``;
  - providers and errors: provider clients (:func:`build_provider`: an SDK is imported only when a
    client of its provider is built), the pool's keys, retries, the model table, error sentences;

- :mod:`agent.settings`: the configuration sections the agent reads;
- :mod:`agent.db`: the database layer under every repository (the gateway's too);
- :mod:`agent.memory`, :mod:`agent.skills`, :mod:`agent.mcp`: each subsystem's own package, for the
  commands that manage it (MCP's SDK is imported with it: import it where it is used);
- :mod:`agent.files`: files written privately and atomically, text made valid, YAML read strictly.

Everything else under ``agent/`` is the agent's own business and may change without notice.
"""

from __future__ import annotations

from agent.assembly import AssemblyError, Models, Shared, Spending, open_agent
from agent.batching.mode import Batching, batching
from agent.cache_misses.diagnosis import CAUSE_LABELS
from agent.cache_watch import CacheWatch
from agent.compression.engine import CompressionOutcome
from agent.events import (
    Compressed,
    EventCallback,
    FailingOver,
    Retrying,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEvent,
)
from agent.hands.sandbox import SandboxUnavailable
from agent.hands.sandbox import reach_report as sandbox_reach
from agent.hands.sandbox import runner_for as sandbox_runner
from agent.hands.sandbox import summary as sandbox_summary
from agent.hands.toolbox import Hands, workspace_path
from agent.limits import LocalRequestLimiter, RequestLimiter
from agent.locks import Lease, LocalSessionLocks, SessionLocks, WaitNotice, pid_alive, wait_to_take
from agent.loop import Agent, TurnResult
from agent.media.budget import MediaLimits, MediaLoad, check_load
from agent.media.documents import prepare_document
from agent.media.errors import MediaRefused
from agent.media.images import is_image_file, prepare_image
from agent.media.memory import DecodeBudget
from agent.media.speech import EdgeSynthesizer, OpenAISynthesizer, Synthesizer
from agent.media.transcribe import OpenAITranscriber, Transcriber, TranscriptionFailed
from agent.model.media import Media
from agent.model.provider import Provider, ProviderError
from agent.model_calls import ModelCalls
from agent.models import ModelInfo, lookup_model, max_tokens_field, with_context_length
from agent.paid import Payer, ServiceCall
from agent.prompt import frozen_memory
from agent.providers import build_provider
from agent.providers.errors import error_message, missing_v1_hint, redact
from agent.providers.pool import ProviderFactory, ProviderKey, ProviderPool
from agent.providers.retry import RetryPolicy
from agent.session import PromptSources, SessionSpec, StartedSession, prompt_tokens_with, start_session
from agent.side import SKIPPED, review
from agent.spending.charge import Charge, Limit, Scope, charging
from agent.spending.counters import Capped, Granted, Loader, Shortfall, SpendCounters, SpendKey, Standing
from agent.spending.gate import OverBudget, Refusal, SpendGate, SpendWarning
from agent.spending.windows import Window, WindowKind, day_window, month_window, zone_name
from agent.store import CacheMiss, MissTotal, PurposeUsage, SessionRecord, SessionStore, SessionTotals
from agent.store.audit import AuditEntry, AuditLog
from agent.store.audit import Outcome as AuditOutcome
from agent.store.cache_misses import MISSES_PER_CHAT
from agent.store.retention import AgentRetention
from agent.store.spending import SpendLedger
from agent.tools.approval import Answer, ApprovalRequest, Approver, Verdict, grantable
from agent.tools.browser.host import missing as browser_missing
from agent.tools.mcp_names import server_of, tool_name
from agent.tools.registry import OPEN, Refuse, Tool, ToolContext, ToolError, ToolGate, ToolRegistry, both
from agent.tools.web.search import SearchError, key_variable, search_provider, unusable
from agent.tools.web.tools import TOOLSET, search_client
from agent.usage import TRANSCRIPTION_PURPOSE, Usage

__all__ = [
    "CAUSE_LABELS",
    "MISSES_PER_CHAT",
    "OPEN",
    "SKIPPED",
    "TOOLSET",
    "TRANSCRIPTION_PURPOSE",
    "Agent",
    "AgentRetention",
    "Answer",
    "ApprovalRequest",
    "Approver",
    "AssemblyError",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "Batching",
    "CacheMiss",
    "CacheWatch",
    "Capped",
    "Charge",
    "Compressed",
    "CompressionOutcome",
    "DecodeBudget",
    "EdgeSynthesizer",
    "EventCallback",
    "FailingOver",
    "Granted",
    "Hands",
    "Lease",
    "Limit",
    "Loader",
    "LocalRequestLimiter",
    "LocalSessionLocks",
    "Media",
    "MediaLimits",
    "MediaLoad",
    "MediaRefused",
    "MissTotal",
    "ModelCalls",
    "ModelInfo",
    "Models",
    "OpenAISynthesizer",
    "OpenAITranscriber",
    "OverBudget",
    "Payer",
    "PromptSources",
    "Provider",
    "ProviderError",
    "ProviderFactory",
    "ProviderKey",
    "ProviderPool",
    "PurposeUsage",
    "Refusal",
    "Refuse",
    "RequestLimiter",
    "RetryPolicy",
    "Retrying",
    "SandboxUnavailable",
    "Scope",
    "SearchError",
    "ServiceCall",
    "SessionLocks",
    "SessionRecord",
    "SessionSpec",
    "SessionStore",
    "SessionTotals",
    "Shared",
    "Shortfall",
    "SpendCounters",
    "SpendGate",
    "SpendKey",
    "SpendLedger",
    "SpendWarning",
    "Spending",
    "Standing",
    "StartedSession",
    "Synthesizer",
    "TextDelta",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFinished",
    "ToolGate",
    "ToolRegistry",
    "ToolStarted",
    "Transcriber",
    "TranscriptionFailed",
    "TurnEvent",
    "TurnResult",
    "Usage",
    "Verdict",
    "WaitNotice",
    "Window",
    "WindowKind",
    "batching",
    "both",
    "browser_missing",
    "build_provider",
    "charging",
    "check_load",
    "day_window",
    "error_message",
    "frozen_memory",
    "grantable",
    "is_image_file",
    "key_variable",
    "lookup_model",
    "max_tokens_field",
    "missing_v1_hint",
    "month_window",
    "open_agent",
    "pid_alive",
    "prepare_document",
    "prepare_image",
    "prompt_tokens_with",
    "redact",
    "review",
    "sandbox_reach",
    "sandbox_runner",
    "sandbox_summary",
    "search_client",
    "search_provider",
    "server_of",
    "start_session",
    "tool_name",
    "unusable",
    "wait_to_take",
    "with_context_length",
    "workspace_path",
    "zone_name",
]
