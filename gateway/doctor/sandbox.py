"""``herald doctor``'s sandbox check: can ``tools.sandbox`` run commands here, and if not, why not.

A sandbox that is not available means the terminal tools are not offered (never a run unsandboxed), and
only the log says so at start-up: doctor makes one sandbox (``bwrap ... true``, a ping of the Docker
Engine) and says what is missing: bwrap, user namespaces, the Docker socket, the image.
"""

from __future__ import annotations

import asyncio

from agent.api import SandboxUnavailable, sandbox_runner, sandbox_summary, workspace_path
from gateway.doctor.findings import DoctorContext, Finding

SUBJECT = "sandbox"
TOOLSET = "terminal"


async def check_sandbox(ctx: DoctorContext) -> list[Finding]:
    """Whether the commands of the terminal tools can run where ``tools.sandbox`` says."""
    if ctx.config is None:
        return [Finding("skip", SUBJECT, "not checked: config.yaml is invalid (see above).")]
    if TOOLSET not in ctx.config.agent.toolsets:
        return [Finding("skip", SUBJECT, "the terminal tool set is off (agent.toolsets).")]
    tools = ctx.config.tools
    workspace = workspace_path(tools, ctx.home.root)
    try:
        runner = await asyncio.to_thread(
            sandbox_runner, tools, workspace=workspace, herald_home=ctx.home.root, environ=ctx.environ
        )
    except SandboxUnavailable as error:
        return [Finding("fail", SUBJECT, f"{error} Sessions get no terminal tools until it is fixed.")]
    text, weak = sandbox_summary(runner)
    return [Finding("warn" if weak else "ok", SUBJECT, weak or text)]
