"""The ``herald`` command line: setup, chat, config get/set, insights, doctor (the gateway, pairing,
cron, memory and skills commands live in modules of their own).

Whatever goes wrong, a command ends with one sentence on stderr and an exit code, never a traceback:
:func:`run` hands every failure to :func:`gateway.failures.explain`, the one place that puts
failures into words. Arguments and stdin are made valid text where they enter (``agent.files.text``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from agent import version
from agent.api import SessionStore
from agent.files import valid_text
from gateway import insights
from gateway.bots.profiles import chosen_bot
from gateway.cli import api as cli_api
from gateway.cli import budget as cli_budget
from gateway.cli import cron as cli_cron
from gateway.cli import gateway as cli_gateway
from gateway.cli import memory as cli_memory
from gateway.cli import skills as cli_skills
from gateway.cli import storage as cli_storage
from gateway.config import format_value, get_value, set_value
from gateway.failures import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_UNUSABLE, CommandFailed, explain
from gateway.home import HeraldHome, ensure_home, load_env, resolve_home
from gateway.home.database import home_config, open_home_storage

TEXT_LATER = "\0"  # -q followed by another option: its text comes later (argv can hold no NUL)


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
        raise CommandFailed(
            f"To send one message, use -q: herald chat -q {shlex.quote(text)}", EXIT_UNUSABLE
        )
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
        "reads or changes (chat, cron, pairing, memory, skills, budget, insights, storage, config get)",
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
    cli_gateway.add_commands(commands, common)
    cli_cron.add_commands(commands, common)
    cli_budget.add_commands(commands, common)
    cli_storage.add_commands(commands, common)
    cli_memory.add_commands(commands, common)
    cli_skills.add_commands(commands, common)
    cli_api.add_commands(commands, common)
    return parser


def configure_logging(verbose: bool, *, level: int = logging.WARNING) -> None:
    """``level`` for Herald's own logs (``-v``: debug); other libraries stay at warnings, so the SDKs'
    request dumps (which contain URLs with tokens) never reach the log."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for package in ("agent", "gateway", "adapters"):
        logging.getLogger(package).setLevel(logging.DEBUG if verbose else level)


def configure_streams() -> None:
    """Reading stdin never fails on bytes that are not UTF-8 (they are replaced later, see
    ``agent.files.text``), and printing never fails on a terminal that cannot show a character."""
    for stream, errors in ((sys.stdin, "surrogateescape"), (sys.stdout, "replace"), (sys.stderr, "replace")):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=errors)


def read_stdin() -> str:
    """All of stdin as valid text (``herald chat -q -``)."""
    return valid_text(sys.stdin.read())


def _setup(home: HeraldHome) -> int:
    created = ensure_home(home)
    print(f"Herald home: {home.root}")
    for path in created:
        print(f"  created {path}")
    if not created:
        print("  everything was already there; nothing changed")
    print(
        f"Put your API key in {home.env_path} (ANTHROPIC_API_KEY or OPENAI_API_KEY), then run `herald chat`."
    )
    return 0


def _config(home: HeraldHome, args: argparse.Namespace) -> int:
    if args.config_command == "get":
        print(format_value(get_value(home_config(home), args.key)))
        return 0
    ensure_home(home)  # a first `set` starts from the commented default file, as `setup` writes it
    config = set_value(home.config_path, args.key, args.value)
    print(f"{args.key} = {format_value(get_value(config, args.key))}")
    return 0


async def _chat(home: HeraldHome, args: argparse.Namespace) -> int:
    from gateway.cli.chat import TerminalInput, ask_once, chat_header, interactive, open_terminal

    config = home_config(home)
    query = read_stdin() if args.query == "-" else args.query
    if query is not None and not query.strip():
        print("Nothing to send: give `herald chat -q` a non-empty message.", file=sys.stderr)
        return EXIT_UNUSABLE
    requested = args.provider is not None or args.model is not None
    async with open_terminal(
        config,
        home,
        out=sys.stdout,
        err=sys.stderr,
        live=query is None,
        provider=args.provider,
        model=args.model,
        context_dir=Path.cwd(),
    ) as terminal:
        session = await terminal.begin(resume=args.resume, model_requested=requested)
        if query is not None:
            return await ask_once(terminal, query, out=sys.stdout, err=sys.stderr)
        sys.stdout.write(chat_header(session))
        return await interactive(terminal, out=sys.stdout, read=TerminalInput())


async def _insights(home: HeraldHome) -> int:
    async with open_home_storage(home, pool_size=2, read_only=True) as storage:
        store = SessionStore(storage)
        sessions = await store.list_sessions(limit=100_000)
        misses = await insights.miss_report(store, sessions, shown=20)
        print(insights.render(sessions, purposes=await store.usage_by_purpose(), misses=misses))
    return 0


WHOLE_HOME = ("setup", "doctor", "gateway", "api")  # commands about the home or the process: every bot


def one_bot(home: HeraldHome, args: argparse.Namespace) -> HeraldHome:
    """The home as ``--bot NAME`` sees it; refused for a command about the whole home (``config set``
    writes the one config.yaml: a bot's settings are under bots.NAME.settings)."""
    if args.command in WHOLE_HOME or (args.command == "config" and args.config_command != "get"):
        what = f"{args.command} {args.config_command}" if args.command == "config" else args.command
        text = f"herald {what} is about the whole home, not one bot: leave out --bot."
        raise CommandFailed(text, EXIT_UNUSABLE)
    load_env(home)  # storage.url may name a variable kept in .env
    return chosen_bot(home, args.bot, os.environ)


def run(argv: Sequence[str] | None = None) -> int:
    """Run one ``herald`` command and return its exit code (errors are reported, never raised)."""
    arguments = [valid_text(argument) for argument in (sys.argv[1:] if argv is None else argv)]
    try:
        return _dispatch(arguments)
    except SystemExit as exit_:  # argparse: --help, --version, a usage error (it printed why)
        if exit_.code is None:
            return 0
        return exit_.code if isinstance(exit_.code, int) else EXIT_UNUSABLE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:
        failure = explain(error)
        if failure.message:
            print(f"herald: {failure.message}", file=sys.stderr)
        return failure.code


def _dispatch(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "chat":  # a usage error before anything is created or read
        args.query = one_shot_text(args.query, args.text)
    configure_logging(getattr(args, "verbose", False))
    home = resolve_home()
    if args.bot is not None:
        home = one_bot(home, args)
    if args.command == "setup":
        return _setup(home)
    if args.command == "config":
        return _config(home, args)
    if args.command == "doctor":
        from gateway.doctor.mcp import check_mcp
        from gateway.doctor.platforms import check_platforms
        from gateway.doctor.run import default_checks, run_doctor
        from gateway.doctor.web import check_web_search

        checks = [*default_checks(), check_platforms, check_web_search, check_mcp]
        return asyncio.run(run_doctor(home, offline=args.offline, out=sys.stdout, checks=checks))
    ensure_home(home)
    load_env(home)
    if args.command == "chat":
        return asyncio.run(_chat(home, args))
    if args.command == "insights":
        return asyncio.run(_insights(home))
    if args.command == "gateway":
        if args.gateway_command == "run":
            configure_logging(getattr(args, "verbose", False), level=logging.INFO)  # one line per message
        return cli_gateway.run_gateway_command(home, args)
    if args.command == "pairing":
        return cli_gateway.run_pairing_command(home, args)
    if args.command == "cron":
        return cli_cron.run_cron_command(home, args)
    if args.command == "budget":
        return cli_budget.run_budget_command(home, args)
    if args.command == "storage":
        return cli_storage.run_storage_command(home, args)
    if args.command == "memory":
        return cli_memory.run_memory_command(home, args)
    if args.command == "skills":
        return cli_skills.run_skills_command(home, args)
    if args.command == "api":
        return cli_api.run_api_command(home, args)
    return EXIT_UNUSABLE


def main(argv: Sequence[str] | None = None) -> None:
    configure_streams()
    code = run(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left: say nothing more (Python would, at exit)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = code or EXIT_FAILED
    # Everything was closed explicitly; without this, the interpreter's last garbage collection walks
    # every object the SDKs and pydantic made, which took seconds on a busy machine after the answer
    # was printed (or Ctrl-C stopped it). Frozen objects are left to the process's end instead.
    gc.freeze()
    sys.exit(code)
