"""``herald doctor``'s sandbox check: can ``tools.sandbox`` run commands here, and if not, why not.

A sandbox that is not available means the terminal tools are not offered (never a run unsandboxed), and
only the log says so at start-up: doctor makes one sandbox (``bwrap ... true``, a ping of the Docker
Engine) and says what is missing: bwrap, user namespaces, the Docker socket, the image. With
``tools.sandbox: auto`` and no bubblewrap here it warns that commands run unsandboxed. For bubblewrap it
then looks around from inside a sandbox and lists what a command can write and which UNIX sockets it can
reach (a warning when there is one: a service a command could talk to).
"""

from __future__ import annotations

import asyncio

from agent.api import SandboxUnavailable, sandbox_reach, sandbox_runner, sandbox_summary, workspace_path
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
    findings = [Finding("warn" if weak else "ok", SUBJECT, weak or text)]
    surveyed = await asyncio.to_thread(sandbox_reach, runner)
    if surveyed is not None:
        said, warn = surveyed
        findings.append(Finding("warn" if warn else "ok", SUBJECT, said))
    return findings
