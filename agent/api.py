"""The agent's public surface for the gateway: running turns of stored sessions, and what that needs.

The gateway imports the agent only through its doors (``tests/test_layering.py`` holds it to them):

- :mod:`agent.api` (this module): sessions and their prompts, the store, the per-session locks, the
  tool loop and its events, compression, side tasks (reviews), the request cap, usage and the cache-miss
  watch, files a person sends (images, documents, voice notes), speech for spoken replies, the tool
  registry and the built-in tools, the owner's hands (shell and files, their approvals and audit:
  ``agent.hands``), provider clients (:func:`build_provider`: an SDK is imported only when a client of
  its provider is built);
- :mod:`agent.settings`: the configuration sections the agent reads;
- :mod:`agent.db`: the database layer under every repository (the gateway's too);
- :mod:`agent.memory`, :mod:`agent.skills`, :mod:`agent.mcp`: each subsystem's own package, for the
  commands that manage it (MCP's SDK is imported with it: import it where it is used);
- :mod:`agent.files`: files written privately and atomically, text made valid, YAML read strictly.

Everything else under ``agent/`` is the agent's own business and may change without notice.
"""

from __future__ import annotations

from agent import version
from agent.agent_settings import AgentSettings
from agent.assembly import AgentConfig, AgentParts, AssemblyError, Models, Shared, Spending, open_agent
from agent.batching.mode import Batching, batching
from agent.batching.road import BatchRoad
from agent.cache_misses.diagnosis import CAUSE_LABELS, Thresholds
from agent.cache_watch import CacheWatch
from agent.compression.engine import CompressionOutcome, ContextCompressor, ContextEngine
from agent.compression.summary import Summarizer
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
from agent.failover import Failover
from agent.hands.downloads import WorkspaceDownloads
from agent.hands.rules import LABELS as APPROVAL_LABELS
from agent.hands.sandbox import SandboxUnavailable
from agent.hands.sandbox import reach_report as sandbox_reach
from agent.hands.sandbox import runner_for as sandbox_runner
from agent.hands.sandbox import summary as sandbox_summary
from agent.hands.toolbox import Hands, WorkspaceUnusable, workspace_path
from agent.hands.toolbox import wanted as hands_wanted
from agent.limits import LocalRequestLimiter, RequestLimiter
from agent.locks import (
    DatabaseSessionLocks,
    Lease,
    LocalSessionLocks,
    SessionLocks,
    WaitNotice,
    pid_alive,
    wait_to_take,
)
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
from agent.providers import PROVIDERS, build_provider
from agent.providers.errors import error_message, missing_v1_hint, redact
from agent.providers.pool import ProviderFactory, ProviderKey, ProviderPool
from agent.providers.retry import MAX_RETRY_AFTER, RetryPolicy
from agent.session import PromptSources, SessionSpec, StartedSession, prompt_tokens_with, start_session
from agent.side import SKIPPED, review
from agent.spending.charge import Charge, Limit, Scope, charging
from agent.spending.counters import (
    Capped,
    Granted,
    Loader,
    LocalCounters,
    Shortfall,
    SpendCounters,
    SpendKey,
    Standing,
)
from agent.spending.gate import OverBudget, Refusal, SpendGate, SpendWarning
from agent.spending.windows import Window, WindowKind, day_window, month_window, zone_name
from agent.store import CacheMiss, MissTotal, PurposeUsage, SessionRecord, SessionStore
from agent.store.audit import AuditEntry, AuditLog
from agent.store.audit import Outcome as AuditOutcome
from agent.store.cache_misses import MISSES_PER_CHAT
from agent.store.leases import SessionLeases
from agent.store.retention import AgentRetention, Forgotten
from agent.store.spending import SpendLedger
from agent.tools.approval import Answer, ApprovalRequest, Approver, Finding, Verdict, grantable
from agent.tools.browser import BrowserTools, DownloadPlace
from agent.tools.browser.host import missing as browser_missing
from agent.tools.builtin import builtin_registry
from agent.tools.mcp_names import server_of, tool_name
from agent.tools.registry import OPEN, Refuse, Tool, ToolContext, ToolError, ToolGate, ToolRegistry, both
from agent.tools.web import WebTools
from agent.tools.web.search import SearchError, key_variable, search_provider, unusable
from agent.tools.web.tools import TOOLSET, search_client
from agent.usage import TRANSCRIPTION_PURPOSE, Usage

__all__ = [
    "APPROVAL_LABELS",
    "CAUSE_LABELS",
    "MAX_RETRY_AFTER",
    "MISSES_PER_CHAT",
    "OPEN",
    "PROVIDERS",
    "SKIPPED",
    "TOOLSET",
    "TRANSCRIPTION_PURPOSE",
    "Agent",
    "AgentConfig",
    "AgentParts",
    "AgentRetention",
    "AgentSettings",
    "Answer",
    "ApprovalRequest",
    "Approver",
    "AssemblyError",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "BatchRoad",
    "Batching",
    "BrowserTools",
    "CacheMiss",
    "CacheWatch",
    "Capped",
    "Charge",
    "Compressed",
    "CompressionOutcome",
    "ContextCompressor",
    "ContextEngine",
    "DatabaseSessionLocks",
    "DecodeBudget",
    "DownloadPlace",
    "EdgeSynthesizer",
    "EventCallback",
    "FailingOver",
    "Failover",
    "Finding",
    "Forgotten",
    "Granted",
    "Hands",
    "Lease",
    "Limit",
    "Loader",
    "LocalCounters",
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
    "SessionLeases",
    "SessionLocks",
    "SessionRecord",
    "SessionSpec",
    "SessionStore",
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
    "Summarizer",
    "Synthesizer",
    "TextDelta",
    "Thresholds",
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
    "WebTools",
    "Window",
    "WindowKind",
    "WorkspaceDownloads",
    "WorkspaceUnusable",
    "batching",
    "both",
    "browser_missing",
    "build_provider",
    "builtin_registry",
    "charging",
    "check_load",
    "day_window",
    "error_message",
    "frozen_memory",
    "grantable",
    "hands_wanted",
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
    "version",
    "wait_to_take",
    "with_context_length",
    "workspace_path",
    "zone_name",
]
