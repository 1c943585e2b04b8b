"""The ``herald`` command line's grammar: every command, its options and their help, in one parser.

It imports nothing but argparse, so ``herald --version``, ``herald --help`` and a usage error answer
at once; :mod:`gateway.cli.dispatch` imports a command's module only when that command runs.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from agent import version
from gateway.chats import is_person_id
from gateway.failures import EXIT_UNUSABLE, CommandFailed

TEXT_LATER = "\0"  # -q followed by another option: its text comes later (argv can hold no NUL)
SCOPE_HELP = "owner (the default), user:PLATFORM:ID (one person) or chat:PLATFORM:ID (a group chat)"

if TYPE_CHECKING:
    from typing import TypeAlias

    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]  # where commands are added


def non_empty(value: str) -> str:
    """An argparse type: a value that is not blank (``--model ""`` would make an unusable session)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def one_shot_text(query: str | None, text: str | None) -> str | None:
    """The message of ``herald chat -q`` (None: an interactive chat): the word after ``-q``, or, when
    another option follows ``-q`` (``-q --continue "TEXT"``: argparse gives ``-q`` no value then), the
    one word left on the line. Raises CommandFailed (a usage error) for a message without ``-q``, ``-q``
    without a message, or two messages."""
    if query is None:
        if text is None:
            return None
        raise CommandFailed(f"To send one message, use -q: herald chat -q {shlex.quote(text)}", EXIT_UNUSABLE)
    if query != TEXT_LATER:
        if text is not None:
            raise CommandFailed(
                f"-q takes one message, but got two ({shlex.quote(query)} and "
                f"{shlex.quote(text)}); put the message in quotes.",
                EXIT_UNUSABLE,
            )
        return query
    if text is None:
        raise CommandFailed(
            '-q needs the message to send: herald chat -q "TEXT" (or - to read it from stdin).',
            EXIT_UNUSABLE,
        )
    return text


def build_parser() -> argparse.ArgumentParser:
    # -v works before or after the command: every parser knows it; SUPPRESS keeps a subcommand's
    # parser from resetting what the main parser already read.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log debug details to stderr"
    )
    parser = argparse.ArgumentParser(
        prog="herald", description="Herald: a chat gateway for LLM agents.", parents=[common]
    )
    parser.add_argument(
        "--bot",
        metavar="NAME",
        help="with bots: in config.yaml, the bot whose state, memory, skills, jobs and settings a command "
        "reads or changes (chat, cron, pairing, memory, skills, budget, insights, storage, sessions, "
        "config get)",
    )
    parser.add_argument("--version", action="version", version=f"herald {version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("setup", parents=[common], help="create HERALD_HOME with defaults (never overwrites)")

    chat = commands.add_parser("chat", parents=[common], help="chat in the terminal")
    chat.add_argument(
        "-q",
        "--query",
        nargs="?",
        const=TEXT_LATER,
        metavar="TEXT",
        help="answer once, print the answer to stdout and exit ('-' reads it from stdin); the text may "
        "also come after the other options (-q --continue TEXT)",
    )
    chat.add_argument("text", nargs="?", help=argparse.SUPPRESS)  # -q's, when other options came between
    chat.add_argument(
        "-c", "--continue", dest="resume", action="store_true", help="resume the latest session"
    )
    chat.add_argument("--provider", choices=["anthropic", "openai"], help="override model.provider")
    chat.add_argument("--model", type=non_empty, help="override model.name")

    config = commands.add_parser("config", parents=[common], help="read or change config.yaml")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    getter = config_commands.add_parser("get", parents=[common], help="print the effective value of a key")
    getter.add_argument("key")
    setter = config_commands.add_parser("set", parents=[common], help="set a dotted key (validated first)")
    setter.add_argument("key")
    setter.add_argument("value")

    commands.add_parser(
        "insights", parents=[common], help="tokens, cache hit ratio and cost per session and purpose"
    )
    doctor = commands.add_parser(
        "doctor", parents=[common], help="check the home, config, keys and provider; say what to fix"
    )
    doctor.add_argument(
        "--offline",
        action="store_true",
        help="skip the checks that need the network (provider, platforms, MCP servers at a URL)",
    )
    add_gateway_commands(commands, common)
    add_cron_commands(commands, common)
    add_budget_commands(commands, common)
    add_storage_commands(commands, common)
    add_sessions_commands(commands, common)
    add_memory_commands(commands, common)
    add_skills_commands(commands, common)
    add_audit_commands(commands, common)
    add_api_commands(commands, common)
    return parser


def add_gateway_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald gateway ...`` and ``herald pairing ...`` (:mod:`gateway.cli.gateway` runs them)."""
    gateway = commands.add_parser(
        "gateway", parents=[common], help="run the chat gateway, or install it as a service"
    )
    gateway_commands = gateway.add_subparsers(dest="gateway_command", required=True)
    run = gateway_commands.add_parser(
        "run", parents=[common], help="serve every enabled platform until SIGTERM"
    )
    run.add_argument(
        "--instance", metavar="NAME", help="this process's name in a cluster (overrides cluster.instance_id)"
    )
    run.add_argument(
        "--http-port", type=int, metavar="PORT", help="the HTTP server's port (overrides gateway.http_port)"
    )
    install = gateway_commands.add_parser(
        "install", parents=[common], help="write a systemd unit for `herald gateway run`"
    )
    install.add_argument("--user", action="store_true", required=True, help="a user unit (no root needed)")

    pairing = commands.add_parser(
        "pairing", parents=[common], help="approve people who asked for access in a direct chat"
    )
    pairing_commands = pairing.add_subparsers(dest="pairing_command", required=True)
    pairing_commands.add_parser("list", parents=[common], help="pending codes and approved people")
    approve = pairing_commands.add_parser("approve", parents=[common], help="approve the person who got CODE")
    approve.add_argument("platform")
    approve.add_argument("code")
    revoke = pairing_commands.add_parser(
        "revoke", parents=[common], help="withdraw a person's approval (and pause the jobs they made)"
    )
    revoke.add_argument("platform")
    revoke.add_argument("user_id")


def add_cron_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald cron ...`` (:mod:`gateway.cli.cron` runs them)."""
    cron = commands.add_parser(
        "cron", parents=[common], help="scheduled jobs: add, list, pause, resume, run, remove"
    )
    cron_commands = cron.add_subparsers(dest="cron_command", required=True)
    add = cron_commands.add_parser(
        "add", parents=[common], help="schedule a prompt whose answer is posted to a chat"
    )
    add.add_argument("--target", required=True, help="chat to post into: platform:chat_id[:thread_id]")
    add.add_argument(
        "--schedule", required=True, help="'0 8 * * 1-5' (cron), 'every 2h', 'in 30m' or an ISO time"
    )
    add.add_argument("--name", help="a short name (default: from the prompt)")
    add.add_argument("--repeat", type=int, help="number of runs, then the job stops (default: until removed)")
    add.add_argument(
        "--batch", action="store_true", help="work that can wait: its runs use the batch API, at half price"
    )
    add.add_argument(
        "--batch-deadline",
        type=float,
        metavar="SECONDS",
        help="with --batch: how long a run may wait for its batch (default: agent.batch_deadline, 7200)",
    )
    add.add_argument("prompt", help="what each run should do")
    cron_commands.add_parser(
        "list", parents=[common], help="every job: schedule, next run, last run and its delivery"
    )
    for verb, text in (
        ("pause", "stop running a job until it is resumed"),
        ("resume", "run a paused job again from its next time"),
        ("run", "run a job now (the running gateway starts it within seconds)"),
        ("remove", "delete a job"),
    ):
        cron_commands.add_parser(verb, parents=[common], help=text).add_argument("job_id")


def add_budget_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald budget`` (:mod:`gateway.cli.budget` runs it)."""
    commands.add_parser(
        "budget", parents=[common], help="spending and limits of every scope today and this month"
    )


def add_storage_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald storage ...`` (:mod:`gateway.cli.storage` runs them)."""
    storage = commands.add_parser("storage", parents=[common], help="where Herald keeps its state")
    storage_commands = storage.add_subparsers(dest="storage_command", required=True)
    migrate = storage_commands.add_parser(
        "migrate", parents=[common], help="copy the state in state.db into PostgreSQL, then verify it"
    )
    migrate.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="postgresql://USER@HOST:PORT/DATABASE, or $NAME to read it from",
    )
    prune = storage_commands.add_parser(
        "prune",
        parents=[common],
        help="delete now what storage.retention keeps no longer (the gateway does it too)",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would be deleted, change nothing")


def add_sessions_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald sessions delete`` (:mod:`gateway.cli.sessions` runs it)."""
    sessions = commands.add_parser(
        "sessions", parents=[common], help="conversations kept until you delete them"
    )
    verbs = sessions.add_subparsers(dest="sessions_command", required=True)
    delete = verbs.add_parser(
        "delete",
        parents=[common],
        help="forget a chat, or everything of a person (messages, files, memory; spend kept without a name)",
    )
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("--chat", metavar="KEY", help="a chat's session key, as herald insights shows it")
    which.add_argument(
        "--person", type=_person, metavar="PLATFORM:ID", help="a person, as gateway.admins names one"
    )


def add_memory_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald memory ...`` (:mod:`gateway.cli.memory` runs them; no scope means the owner's)."""
    memory = commands.add_parser(
        "memory", parents=[common], help="curated memory (MEMORY.md, USER.md) per scope: list, show, edit"
    )
    verbs = memory.add_subparsers(dest="memory_command", required=True)
    verbs.add_parser("list", parents=[common], help="every scope that has memory, with its usage")
    show = verbs.add_parser("show", parents=[common], help="both documents of a scope, with their usage")
    show.add_argument("scope", nargs="?", help=SCOPE_HELP)
    edit = verbs.add_parser(
        "edit", parents=[common], help="edit MEMORY.md (or USER.md) of a scope in $EDITOR"
    )
    edit.add_argument("scope", nargs="?", help=SCOPE_HELP)
    edit.add_argument("--user", action="store_true", help="edit USER.md instead of MEMORY.md")


def add_skills_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald skills ...`` (:mod:`gateway.cli.skills` runs them)."""
    skills = commands.add_parser(
        "skills", parents=[common], help="the skill library: list, show, edit, import"
    )
    verbs = skills.add_subparsers(dest="skills_command", required=True)
    verbs.add_parser("list", parents=[common], help="every skill: name, category, folder, description")
    show = verbs.add_parser("show", parents=[common], help="a skill's SKILL.md and files, or one file")
    show.add_argument("name")
    show.add_argument("path", nargs="?", help="a file of the skill, relative to its folder")
    edit = verbs.add_parser(
        "edit", parents=[common], help="edit a skill's SKILL.md in $EDITOR (a new name creates a skill)"
    )
    edit.add_argument("name")
    importer = verbs.add_parser(
        "import", parents=[common], help="copy a skill folder (or a folder of skill folders) into the library"
    )
    importer.add_argument("directory", type=Path)


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of hours") from None
    if hours <= 0:
        raise argparse.ArgumentTypeError("--since takes a number of hours above 0")
    return hours


def _rows(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of rows from 1 to 100000")
    return int(text)


def add_audit_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald audit`` (:mod:`gateway.cli.audit` runs it, and checks ``--outcome``)."""
    audit = commands.add_parser(
        "audit", parents=[common], help="commands and file operations the agent ran, and approvals"
    )
    audit.add_argument("--chat", help="only this chat's rows (its session key, as herald insights shows it)")
    audit.add_argument("--tool", help="only this tool's rows (terminal, jobs, write_file, ...)")
    audit.add_argument(
        "--outcome",
        action="append",
        help="only rows with this outcome (ran, held, denied, ...; repeat for several)",
    )
    audit.add_argument("--since", type=_hours, metavar="HOURS", help="only rows of the last HOURS hours")
    audit.add_argument("--limit", type=_rows, default=50, help="at most this many rows (default 50)")


def _person(value: str) -> str:
    if not is_person_id(value):
        raise argparse.ArgumentTypeError(f"'{value}' is not platform:user_id (e.g. api:alice)")
    return value


def add_api_commands(commands: Commands, common: argparse.ArgumentParser) -> None:
    """``herald api new-key`` (:mod:`gateway.cli.api` runs it)."""
    api = commands.add_parser("api", parents=[common], help="the OpenAI-compatible API's keys")
    api_commands = api.add_subparsers(dest="api_command", required=True)
    new_key = api_commands.add_parser(
        "new-key", parents=[common], help="make a new API key and show how to configure it"
    )
    new_key.add_argument(
        "--person", type=_person, default="api:me", help="who the key acts for (api:NAME, ...)"
    )
