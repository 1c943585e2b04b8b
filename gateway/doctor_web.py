"""``herald doctor``'s web search check: can the configured ``web.search`` provider be used, and does it
answer?

Without its key (or SearXNG's URL) a provider is quietly left out of new sessions, so the model never
gets ``web_search`` and nobody is told but the log: doctor says what is missing. With it, one search
for a single result (the cheapest request each API has; a hosted API counts it against the plan)
checks the endpoint and the key. The key is never printed, only its variable.
"""

from __future__ import annotations

from agent.tools.web.search import SearchError, key_variable, search_provider, unusable
from agent.tools.web.tools import TOOLSET, search_client
from gateway.doctor import DoctorContext, Finding

SUBJECT = "web search"
TEST_QUERY = "weather"


async def check_web_search(ctx: DoctorContext) -> list[Finding]:
    """The provider of ``web.search``: its key or URL is there, and it answers one search."""
    if ctx.config is None:
        return [Finding("skip", SUBJECT, "not checked: config.yaml is invalid (see above).")]
    web = ctx.config.web
    settings = web.search
    if settings.provider is None:
        return [Finding("skip", SUBJECT, "not enabled (web.search.provider is not set).")]
    if TOOLSET not in ctx.config.agent.toolsets:
        text = f"web.search.provider is {settings.provider}, but the web tool set is off (agent.toolsets)."
        return [Finding("skip", SUBJECT, text)]
    missing = unusable(settings, ctx.environ)
    if missing is not None:
        variable = key_variable(settings)
        fix = (
            f"put {variable} in the environment or in {ctx.home.env_path}"
            if variable is not None
            else "set web.search.searxng_url to your SearXNG's address"
        )
        return [Finding("fail", SUBJECT, f"{missing}, so sessions get no web_search; {fix}.")]
    if ctx.offline:
        return [Finding("skip", SUBJECT, f"{settings.provider} is set up; not checked (--offline).")]
    seconds = min(settings.timeout, ctx.timeout)
    bounded = web.model_copy(update={"search": settings.model_copy(update={"timeout": seconds})})
    async with search_client(bounded) as client:
        provider = search_provider(bounded.search, ctx.environ, client)
        if provider is None:  # unusable() said why above; nothing else leaves it out
            return [Finding("fail", SUBJECT, "the provider could not be set up.")]
        try:
            await provider.search(TEST_QUERY, 1)
        except SearchError as error:
            return [Finding("fail", SUBJECT, str(error).removeprefix("Search failed: "))]
    return [Finding("ok", SUBJECT, f"{provider.name} answered a test search.")]
