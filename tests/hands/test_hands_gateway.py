"""The owner's hands end to end: real python-telegram-bot against the fake Bot API (inline buttons and
their presses), the real anthropic SDK against the emulator (scripted to call the tools), real commands
run by bash in the workspace, the audit read back by ``herald audit``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from adapters.base import Adapter
from adapters.discord.adapter import DiscordAdapter
from adapters.discord.interaction_records import RECORDS
from adapters.discord.spec import SPEC as DISCORD
from agent.db.base import Storage
from agent.hands.processes import alive
from gateway.app import open_gateway
from gateway.home import HeraldHome
from gateway.platforms.records import StoredRecords
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.fakes import FakeDiscord
from tests.fakes.telegram import SentMessage
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.gateway_support import ADMIN, FRIEND, Harness, telegram_gateway
from tests.helpers import chat_in_terminal, herald_cli

pytestmark = pytest.mark.timeout(90)

HANDS = ["memory", "todo", "terminal", "files"]
DISCORD_ADMIN = 1001


def hands(workspace: Path, **tools: Any) -> dict[str, Any]:
    """The sections that give the owner a shell and files in ``workspace``, on this machine itself
    (``tools.sandbox: none``: these tests watch the commands' processes from outside; the sandbox's own
    tests are tests/test_sandbox_*.py)."""
    return {
        "agent": {"toolsets": HANDS},
        "gateway": {"tools_for_guests": ["memory", "todo"]},
        "tools": {"workspace": str(workspace), "sandbox": "none", **tools},
    }


def run(command: str) -> Reply:
    """The model's turn that runs ``command`` in the terminal."""
    return Reply(tool_calls=[ToolUse("terminal", {"command": command})])


def results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last message."""
    content = request.json["messages"][-1]["content"]
    return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]


def result_text(request: RecordedRequest) -> str:
    [block] = results(request)
    content = block["content"]
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


async def question(harness: Harness) -> SentMessage:
    """The bot's message with the approval buttons, once it is shown."""

    def shown() -> SentMessage | None:
        asking = [m for m in harness.visible(ADMIN) if m.reply_markup]
        return asking[-1] if asking else None

    found = await wait_until(shown, what="the approval question", describe=harness.fake.describe)
    assert found is not None
    return found


def labels(message: SentMessage) -> list[str]:
    assert message.reply_markup is not None
    return [button["text"] for row in message.reply_markup["inline_keyboard"] for button in row]


async def outcomes(harness: Harness) -> list[tuple[str, str]]:
    entries = await harness.gateway.services.runtime.store.audit.entries()
    return [(entry.tool, entry.outcome.value) for entry in reversed(entries)]


async def test_a_harmless_command_runs_in_the_workspace_and_the_model_reads_its_output(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("terminal", {"command": "echo hello; pwd; echo oops >&2; exit 3"})]),
            Reply(text="It printed hello."),
        )
        harness.fake.private_message(ADMIN, "say hello from the server")
        await harness.settled()
        shown = result_text(emulator.requests[-1])
        audit = await outcomes(harness)

    seconds = shown.split("(")[1].split(")")[0]
    assert shown == f"Exit code 3 ({seconds}).\nstdout:\nhello\n{workspace}\nstderr:\noops"
    assert harness.texts(ADMIN)[-1] == "It printed hello."
    assert not [m for m in harness.visible(ADMIN) if m.reply_markup]  # nothing was asked
    assert audit == [("terminal", "ran")]


async def test_commands_not_proven_harmless_are_held_and_their_canaries_survive(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    (workspace / "src").mkdir(parents=True)
    (workspace / "notes.txt").write_text("TODO one\nTODO two\n")
    (workspace / "src" / "canary.txt").write_text("alive")
    outside.mkdir()
    (outside / "canary.txt").write_text("alive")
    attacks = [  # issue 30: each ran without a question under the denylist
        "find src -type f -exec rm {} +",
        f"find {outside} -delete",
        "trap 'rm -rf src' EXIT",
        "function f { rm -rf src; }; f",
        "hash -p /bin/rm ls; ls -rf src",
        "truncate -s 0 src/canary.txt",
        "python3 -c \"import shutil; shutil.rmtree('src')\"",
        "awk 'BEGIN{system(\"rm -rf src\")}'",
    ]
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(
            run("grep -c TODO notes.txt | wc -l && git status 2>/dev/null; ls src"), Reply(text="ok")
        )
        harness.fake.private_message(ADMIN, "count the todos")
        await harness.settled()
        harmless = result_text(emulator.requests[-1])
        asked_before = [m for m in harness.visible(ADMIN) if m.reply_markup]
        held = []
        for attack in attacks:
            emulator.script(run(attack), Reply(text="Not done."))
            harness.fake.private_message(ADMIN, "tidy up")
            asking = await question(harness)
            held.append(attack in asking.text)
            harness.fake.press_button(ADMIN, asking.message_id, ADMIN, "Deny")
            await harness.settled()
        audit = await outcomes(harness)

    assert "canary.txt" in harmless and not asked_before  # reading and listing: no question
    assert all(held)
    assert (workspace / "src" / "canary.txt").read_text() == "alive"
    assert (outside / "canary.txt").read_text() == "alive"
    assert audit == [("terminal", "ran"), *[("terminal", "held"), ("terminal", "denied")] * len(attacks)]


async def test_herald_s_keys_stay_out_of_commands_and_files_and_never_reach_the_provider(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    secret = "sk-canary-0123456789"
    with home.env_path.open("a") as env:
        env.write(f"\nHERALD_CANARY_KEY={secret}\n")
    workspace = home.root / "workspace"  # the default place: inside the home, next to .env
    workspace.mkdir(exist_ok=True)
    globbed = home.root.name[:-1] + "?"
    reads = [  # issue 30: each ran without a question and the keys went to the provider
        "cat $(dirname $PWD)/.env",
        f"cat ../../{globbed}/.env",
        "cat ../.env",
        "cat /proc/$PPID/environ",
        f"cat /proc/{os.getpid()}/environ",
        "grep -r KEY ..",
    ]
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        for command in reads:
            emulator.script(run(command), Reply(text="Not read."))
            harness.fake.private_message(ADMIN, "show me the keys")
            asking = await question(harness)
            harness.fake.press_button(ADMIN, asking.message_id, ADMIN, "Deny")
            await harness.settled()
        os.link(home.env_path, workspace / "notes.txt")  # as an approved "ln ../.env notes.txt" would
        emulator.script(
            Reply(tool_calls=[ToolUse("read_file", {"path": "notes.txt"})]), Reply(text="Not read either.")
        )
        harness.fake.private_message(ADMIN, "read notes.txt")
        await harness.settled()
        refused = result_text(emulator.requests[-1])
        audit = await outcomes(harness)

    assert "hard link" in refused
    assert not [request for request in emulator.requests if secret.encode() in request.body]
    assert audit == [*[("terminal", "held"), ("terminal", "denied")] * len(reads), ("read_file", "failed")]


async def test_a_dangerous_command_waits_for_the_button_and_runs_once_approved(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "build" / "cache").mkdir(parents=True)
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("terminal", {"command": "rm -rf build && echo removed"})]),
            Reply(text="The build folder is gone."),
        )
        harness.fake.private_message(ADMIN, "clean the build")
        asking = await question(harness)
        assert (workspace / "build").exists()  # held: nothing ran yet
        assert labels(asking) == ["Approve once", "Allow this command for the session", "Deny"]
        assert "rm -rf build && echo removed" in asking.text and "deletes recursively" in asking.text
        press = harness.fake.press_button(ADMIN, asking.message_id, ADMIN, "Approve once")
        await harness.settled()
        shown = result_text(emulator.requests[-1])
        note = harness.fake.press_answer(press)
        edited = next(m for m in harness.fake.messages(ADMIN) if m.message_id == asking.message_id)
        audit = await outcomes(harness)
        listed = await herald_cli("audit", "--tool", "terminal")

    assert not (workspace / "build").exists()
    assert shown.startswith("Exit code 0") and "removed" in shown
    assert note is not None and note["text"].startswith("Approved once: rm -rf build")
    assert edited.reply_markup is None and edited.text.endswith("✅ Approved once by User.")
    assert harness.texts(ADMIN)[-1] == "The build folder is gone."
    assert audit == [("terminal", "held"), ("terminal", "approved_once"), ("terminal", "ran")]
    lines = [line.split(": ")[0].split(" ", 4)[-1] for line in listed.splitlines() if "rm -rf" in line]
    assert [line.split(" [")[0] for line in lines] == [
        f"held for telegram:{ADMIN}",
        f"approved_once by telegram:{ADMIN}",
        f"ran exit 0 for telegram:{ADMIN}",
    ]
    assert lines[0].endswith("]") and lines[1].endswith("]") and not lines[2].endswith("]")  # the code


async def test_deny_and_no_answer_in_time_run_nothing_and_the_model_is_told(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    command = "sudo reboot"
    tools = hands(workspace, approval_timeout=1.0)
    async with telegram_gateway(home, emulator, emulator_url, **tools) as harness:
        emulator.script(run(f"{command}; touch ran"), Reply(text="Not done."))
        harness.fake.private_message(ADMIN, "reboot")
        await question(harness)
        harness.fake.private_message(ADMIN, "/deny")  # typed: the one command waiting in this chat
        await harness.settled()
        denied = result_text(emulator.requests[-1])
        deny_reply = harness.texts(ADMIN)[-2]

        emulator.script(run(f"{command}; touch ran"), Reply(text="No answer."))
        harness.fake.private_message(ADMIN, "reboot again")
        asking = await question(harness)
        await harness.settled()  # the second passes with no answer: a no
        expired = result_text(emulator.requests[-1])
        edited = next(m for m in harness.fake.messages(ADMIN) if m.message_id == asking.message_id)
        audit = await outcomes(harness)

    assert not (workspace / "ran").exists()
    assert deny_reply.startswith("Denied: sudo reboot; touch ran.")
    assert denied.startswith("Not run: the owner denied it (runs as another user")
    assert expired.startswith("Not run: the owner did not answer within 1 seconds, which counts as a no")
    assert edited.reply_markup is None and edited.text.endswith("⌛ No answer in time: not run.")
    assert audit == [
        ("terminal", "held"),
        ("terminal", "denied"),
        ("terminal", "held"),
        ("terminal", "expired"),
    ]


async def test_approval_for_the_session_covers_that_exact_command_in_that_session_only(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    canary = outside / "keep" / "canary.txt"
    canary.write_text("alive")
    (workspace / "build" / "x").mkdir(parents=True)
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(run("rm -rf build"), Reply(text="build gone."))
        harness.fake.private_message(ADMIN, "remove build")
        asking = await question(harness)
        harness.fake.press_button(ADMIN, asking.message_id, ADMIN, "Allow this command for the session")
        await harness.settled()
        (workspace / "build" / "y").mkdir(parents=True)
        emulator.script(run("rm -rf build"), Reply(text="build gone again."))
        harness.fake.private_message(ADMIN, "remove build again")
        await harness.settled()  # the same command: granted, no question
        asked_for_build = len([m for m in harness.fake.messages(ADMIN) if m.versions[0].startswith("⚠️")])

        emulator.script(run(f"find {outside} -delete"), Reply(text="Kept."))
        harness.fake.private_message(ADMIN, "clean outside")
        wider = await question(harness)  # another command with the same danger: asked again
        assert wider.message_id != asking.message_id and canary.exists()
        harness.fake.press_button(ADMIN, wider.message_id, ADMIN, "Deny")
        await harness.settled()

        harness.fake.private_message(ADMIN, "/new")
        await harness.settled()
        (workspace / "build").mkdir()
        emulator.script(run("rm -rf build"), Reply(text="Kept build."))
        harness.fake.private_message(ADMIN, "remove build")
        again = await question(harness)  # a new session: the grant is gone
        harness.fake.press_button(ADMIN, again.message_id, ADMIN, "Deny")
        await harness.settled()
        audit = await outcomes(harness)

    assert asked_for_build == 1
    assert canary.read_text() == "alive" and (workspace / "build").exists()
    assert audit == [
        ("terminal", "held"),
        ("terminal", "approved_session"),
        ("terminal", "ran"),
        ("terminal", "granted"),
        ("terminal", "ran"),
        ("terminal", "held"),
        ("terminal", "denied"),
        ("terminal", "held"),
        ("terminal", "denied"),
    ]


async def test_what_cannot_be_read_is_never_allowed_for_the_session(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "victim" / "x").mkdir(parents=True)
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(run("x=date; $x"), Reply(text="Dated."))
        harness.fake.private_message(ADMIN, "what day is it")
        asking = await question(harness)
        offered = labels(asking)
        code = asking.text.split("/deny ")[1][:6]
        harness.fake.private_message(ADMIN, f"/approve {code} session")  # typed anyway
        await harness.settled()
        told = [m.text for m in harness.visible(ADMIN) if m.text.startswith("Approved")]

        emulator.script(run("$(echo rm) -rf victim"), Reply(text="Kept."))
        harness.fake.private_message(ADMIN, "now this")
        second = await question(harness)  # also "cannot be read", and still asked
        assert (workspace / "victim").exists()
        harness.fake.press_button(ADMIN, second.message_id, ADMIN, "Deny")
        await harness.settled()
        audit = await outcomes(harness)

    assert offered == ["Approve once", "Deny"]
    assert "cannot be read for sure" in asking.text and "can only be approved once" in asking.text
    assert told == [
        "Approved once: x=date; $x. Only once: a command that cannot be read for sure, runs as another user "
        "or runs downloaded code is never approved for the session."
    ]
    assert (workspace / "victim").exists()
    assert audit == [
        ("terminal", "held"),
        ("terminal", "approved_once"),
        ("terminal", "ran"),
        ("terminal", "held"),
        ("terminal", "denied"),
    ]


async def test_a_guests_session_has_no_shell_or_file_tool_and_their_call_is_refused(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("terminal", {"command": "touch pwned"})]), Reply(text="I can't.")
        )
        harness.fake.private_message(FRIEND, "run touch pwned")
        await harness.settled()
        request = emulator.requests[-1]
        [refused] = results(request)

    offered = {tool["name"] for tool in request.json["tools"]}
    assert not offered & {"terminal", "jobs", "read_file", "write_file", "patch_file", "list_files"}
    assert refused["is_error"] and not (workspace / "pwned").exists()
    assert harness.texts(FRIEND)[-1] == "I can't."


async def test_file_tools_edit_in_the_workspace_and_refuse_escapes_by_dots_and_links(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("the owner's secret\n")
    (workspace / "notes").mkdir()
    (workspace / "notes" / "todo.md").write_text("- buy mlik\n- call mum\n")
    (workspace / "link").symlink_to(tmp_path)
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(
            Reply(
                tool_calls=[
                    ToolUse("patch_file", {"path": "notes/todo.md", "old": "mlik", "new": "milk"}),
                    ToolUse("patch_file", {"path": "notes/todo.md", "old": "- ", "new": "* "}),
                    ToolUse("read_file", {"path": "../secret.txt"}),
                    ToolUse("read_file", {"path": "link/secret.txt"}),
                    ToolUse("write_file", {"path": "link/secret.txt", "content": "overwritten"}),
                ]
            ),
            Reply(text="Fixed the typo."),
        )
        harness.fake.private_message(ADMIN, "fix the typo in notes/todo.md")
        await harness.settled()
        blocks = results(emulator.requests[-1])
        audit = await harness.gateway.services.runtime.store.audit.entries()

    assert (workspace / "notes" / "todo.md").read_text() == "- buy milk\n- call mum\n"
    assert outside.read_text() == "the owner's secret\n"
    patched, ambiguous, dots, link, write = blocks
    assert not patched.get("is_error")
    assert ambiguous.get("is_error") and "occurs 2 times in 'notes/todo.md'" in str(ambiguous["content"])
    assert dots.get("is_error") and "is outside the workspace and tools.allowed_paths" in str(dots["content"])
    for refused in (link, write):
        assert refused.get("is_error") and "through a symbolic link" in str(refused["content"])
    assert not any("the owner's secret" in str(block["content"]) for block in blocks)
    assert sorted((entry.tool, entry.outcome.value, entry.action) for entry in audit) == [
        ("patch_file", "failed", "patch notes/todo.md"),
        ("patch_file", "ran", "patch notes/todo.md"),
        ("read_file", "failed", "read ../secret.txt"),
        ("read_file", "failed", "read link/secret.txt"),
        ("write_file", "failed", "write link/secret.txt"),
    ]


async def test_a_command_is_stopped_at_its_timeout_and_by_stop_with_what_it_started(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "forever.sh").write_text('echo $$ > "$1.pid"; exec sleep 1000\n')
    forever = "sh forever.sh {name}"  # on the owner's safe list: runs without asking
    tools = hands(workspace, safe_commands=["sh forever.sh"])
    async with telegram_gateway(home, emulator, emulator_url, **tools) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("terminal", {"command": forever.format(name="timed"), "timeout": 1})]),
            Reply(text="It hung."),
        )
        harness.fake.private_message(ADMIN, "run the thing")
        await harness.settled()
        timed_out = result_text(emulator.requests[-1])
        timed_pid = int((workspace / "timed.pid").read_text())

        emulator.script(
            Reply(
                tool_calls=[
                    ToolUse("terminal", {"command": forever.format(name="background"), "background": True})
                ]
            ),
            Reply(tool_calls=[ToolUse("terminal", {"command": forever.format(name="foreground")})]),
            Reply(text="never sent"),
        )
        harness.fake.private_message(ADMIN, "run both")
        pid_file = workspace / "foreground.pid"
        await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the command")
        pids = [int((workspace / f"{name}.pid").read_text()) for name in ("foreground", "background")]
        assert all(alive(pid) for pid in pids)
        harness.fake.private_message(ADMIN, "/stop")
        await harness.settled()
        stop_reply = harness.texts(ADMIN)[-1]

        async def recorded() -> list[tuple[str, str]]:
            return await outcomes(harness)

        audit = await wait_until_awaited(recorded, what="the audit")

    assert timed_out.startswith("Stopped after 1 s (its timeout); it had not finished.")
    assert not alive(timed_pid)
    assert not any(alive(pid) for pid in pids)
    assert stop_reply == "Stopped. Stopped 1 background command(s) too."
    assert audit == [("terminal", "timed_out"), ("terminal", "started"), ("terminal", "stopped")]


async def test_ten_megabytes_of_output_reach_the_model_as_head_and_tail(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    command = "echo START; head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END"
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        emulator.script(Reply(tool_calls=[ToolUse("terminal", {"command": command})]), Reply(text="Long."))
        harness.fake.private_message(ADMIN, "print a lot")
        await harness.settled()
        shown = result_text(emulator.requests[-1])

    assert len(shown) < 11_000
    assert "stdout:\nSTART\nxxx" in shown and shown.endswith("xxx\nEND")
    cut = 10_000_011 - 10_000  # START, the x's and END with their newlines; 10,000 kept
    assert f"\n[... {cut:,} bytes cut; 10,000,011 in all ...]\n" in shown


async def test_the_terminal_asks_y_or_n_and_runs_only_what_was_approved(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    for name in ("kept", "gone"):
        (workspace / name / "x").mkdir(parents=True)
    emulator.script(
        Reply(tool_calls=[ToolUse("terminal", {"command": "rm -rf kept"})]),
        Reply(text="Left it."),
        Reply(tool_calls=[ToolUse("terminal", {"command": "rm -rf gone"})]),
        Reply(text="Removed it."),
    )
    sections = hands(workspace)
    config = make_config(emulator_url, agent=sections["agent"], tools=sections["tools"])
    chat = await chat_in_terminal(config, home, "remove kept", "n", "remove gone", "y", "/quit")

    assert (workspace / "kept").exists() and not (workspace / "gone").exists()
    assert chat.out.count("⚠️ Approval needed: the agent wants to run") == 2
    assert "Denied: rm -rf kept." in chat.out and "Approved once: rm -rf gone." in chat.out
    assert "Left it." in chat.out and "Removed it." in chat.out


async def test_on_discord_the_question_has_buttons_and_a_press_is_answered_privately(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "build" / "x").mkdir(parents=True)
    fake = FakeDiscord()
    fake.add_user(DISCORD_ADMIN, "owner")
    sections = hands(workspace)
    config = make_config(
        emulator_url,
        agent=sections["agent"],
        tools=sections["tools"],
        gateway={"admins": [f"discord:{DISCORD_ADMIN}"], "http_port": 0},
        discord={"api_base": fake.rest_url, "gateway_url": fake.gateway_url},
    )
    async with fake.serve():

        def adapters(storage: Storage) -> list[Adapter]:
            return [
                DiscordAdapter(
                    fake.token,
                    api_base=fake.rest_url,
                    gateway_url=fake.gateway_url,
                    ephemeral_commands={"approve", "deny"},
                    records=StoredRecords(storage, DISCORD.name, RECORDS),
                    identify_delay=0.0,
                    guild_ready_timeout=0.05,
                    start_timeout=5.0,
                )
            ]

        async with open_gateway(config, home, adapters=adapters) as gateway:
            emulator.script(run("rm -rf build"), Reply(text="Cleaned."))
            fake.dm_message(DISCORD_ADMIN, "clean the build")
            channel = fake.dm_channel(DISCORD_ADMIN)

            def asked() -> Any:
                return next((m for m in fake.messages(channel) if m.components), None)

            asking = await wait_until(asked, what="the approval question", describe=fake.describe)
            assert (workspace / "build").exists()
            buttons = [item["label"] for row in asking.components for item in row["components"]]
            press = fake.press_button(asking.message_id, "Approve once", user_id=DISCORD_ADMIN)

            async def answered() -> bool:
                shown = [m.content for m in fake.messages(channel) if not m.deleted]
                sent = not await gateway.services.outbox.pending_count()
                return bool(shown) and shown[-1] == "Cleaned." and sent

            await wait_until_awaited(answered, what="the answer", describe=fake.describe)
            responses = fake.interaction_responses(int(press["id"]))
            question = fake.message(asking.message_id)

    assert buttons == ["Approve once", "Allow this command for the session", "Deny"]
    assert not (workspace / "build").exists()
    deferred, filled = responses[0], responses[-1]
    assert deferred.kind == "callback" and deferred.type == 5 and deferred.data.get("flags") == 64
    assert filled.kind == "edit_original" and filled.data["content"].startswith("Approved once: rm -rf build")
    assert question.components == [] and question.content.endswith("✅ Approved once by Owner.")


async def test_approve_with_a_code_answers_the_held_command_and_pairing_codes_keep_their_meaning(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "old").mkdir(parents=True)
    async with telegram_gateway(home, emulator, emulator_url, **hands(workspace)) as harness:
        fake = harness.fake
        emulator.script(run("rm -rf old"), Reply(text="Old is gone."))
        fake.private_message(ADMIN, "remove old")
        asking = await question(harness)
        code = asking.text.split("/deny ")[1][:6]
        fake.private_message(FRIEND, f"/approve {code}")
        fake.private_message(ADMIN, "/approve K7QX2MZZ")  # 8 characters: a pairing code
        await wait_until(lambda: len(harness.texts(FRIEND)) == 1 and len(harness.texts(ADMIN)) == 2)
        assert (workspace / "old").exists()  # neither answered the held command
        fake.private_message(ADMIN, f"/approve {code.lower()} session")
        await harness.settled()
        replies = [m.text for m in harness.visible(ADMIN) if not m.text.startswith("⚠️")]

    assert harness.texts(FRIEND) == ["Only an admin can use /approve."]
    assert replies[0] == "No pending telegram pairing code K7QX2MZZ (codes expire after an hour)."
    assert replies[1] == (
        "Approved: rm -rf old. This exact command runs again without asking until /new; others still ask."
    )
    assert replies[-1] == "Old is gone."
    assert not (workspace / "old").exists()


async def test_background_commands_are_listed_and_stopped_when_herald_stops(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "server.sh").write_text("echo $$ > server.pid; echo listening; exec sleep 1000\n")
    server = "sh server.sh"
    tools = hands(workspace, safe_commands=["sh server.sh"])
    async with telegram_gateway(home, emulator, emulator_url, **tools) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("terminal", {"command": server, "background": True})]),
            Reply(tool_calls=[ToolUse("jobs", {"action": "list"})]),
            Reply(text="The server runs."),
        )
        harness.fake.private_message(ADMIN, "start the server")
        await harness.settled()
        listed = result_text(emulator.requests[-1])
        pid = int((workspace / "server.pid").read_text())
        assert alive(pid)

    assert listed.startswith("job 1: running for ") and listed.endswith(f" - {server}")
    assert not alive(pid)
