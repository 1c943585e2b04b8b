"""The ``herald`` command line: setup, chat, config get/set, insights, doctor (the gateway, pairing,
cron, memory and skills commands live in modules of their own; every command's options are in
:mod:`gateway.cli.grammar`).

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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli.grammar import build_parser, one_shot_text
from gateway.failures import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_UNUSABLE, CommandFailed
from gateway.heap import defer_collection
from gateway.inspection import forbid_inspection

if TYPE_CHECKING:
    from gateway.home import HeraldHome


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
    from agent.files import valid_text

    return valid_text(sys.stdin.read())


def _setup(home: HeraldHome) -> int:
    from gateway.home import ensure_home

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
    from gateway.config import format_value, get_value, set_value
    from gateway.home import ensure_home
    from gateway.home.database import home_config

    if args.config_command == "get":
        print(format_value(get_value(home_config(home), args.key)))
        return 0
    ensure_home(home)  # a first `set` starts from the commented default file, as `setup` writes it
    config = set_value(home.config_path, args.key, args.value)
    print(f"{args.key} = {format_value(get_value(config, args.key))}")
    return 0


async def _chat(home: HeraldHome, args: argparse.Namespace) -> int:
    from gateway.cli.chat import TerminalInput, ask_once, chat_header, interactive, open_terminal
    from gateway.home.database import home_config

    config = home_config(home)
    query = read_stdin() if args.query == "-" else args.query
    if query is not None and not query.strip():
        print("Nothing to send: give `herald chat -q` a non-empty message.", file=sys.stderr)
        return EXIT_UNUSABLE
    requested = args.provider is not None or args.model is not None
    read = TerminalInput()
    async with open_terminal(
        config,
        home,
        out=sys.stdout,
        err=sys.stderr,
        live=query is None,
        provider=args.provider,
        model=args.model,
        context_dir=Path.cwd(),
        ask=read if query is None else None,
    ) as terminal:
        session = await terminal.begin(resume=args.resume, model_requested=requested)
        if query is not None:
            return await ask_once(terminal, query, out=sys.stdout, err=sys.stderr)
        gc.enable()  # an interactive chat runs for as long as the person talks (see gateway.heap)
        sys.stdout.write(chat_header(session))
        return await interactive(terminal, out=sys.stdout, read=read)


async def _insights(home: HeraldHome) -> int:
    from agent.api import SessionStore
    from gateway import insights
    from gateway.home.database import open_home_storage

    async with open_home_storage(home, pool_size=2, read_only=True) as storage:
        print(await insights.report(SessionStore(storage)))
    return 0


WHOLE_HOME = ("setup", "doctor", "gateway", "api")  # commands about the home or the process: every bot


def one_bot(home: HeraldHome, args: argparse.Namespace) -> HeraldHome:
    """The home as ``--bot NAME`` sees it; refused for a command about the whole home (``config set``
    writes the one config.yaml: a bot's settings are under bots.NAME.settings)."""
    if args.command in WHOLE_HOME or (args.command == "config" and args.config_command != "get"):
        what = f"{args.command} {args.config_command}" if args.command == "config" else args.command
        text = f"herald {what} is about the whole home, not one bot: leave out --bot."
        raise CommandFailed(text, EXIT_UNUSABLE)
    from gateway.bots.profiles import chosen_bot
    from gateway.home import load_env

    load_env(home)  # storage.url may name a variable kept in .env
    return chosen_bot(home, args.bot, os.environ)


def run(argv: Sequence[str] | None = None) -> int:
    """Run one ``herald`` command and return its exit code (errors are reported, never raised)."""
    from agent.files import valid_text

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
        from gateway.failures import explain  # only when something failed

        failure = explain(error)
        if failure.message:
            print(f"herald: {failure.message}", file=sys.stderr)
        return failure.code


def _dispatch(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run its command. A command's module is imported here, when it runs: the
    modules behind the commands load the SDKs, the config schema and the database layer, which
    ``--version``, ``--help`` and a usage error never need."""
    args = build_parser().parse_args(argv)
    if args.command == "chat":  # a usage error before anything is created or read
        args.query = one_shot_text(args.query, args.text)
    else:
        gc.enable()  # only a chat's start-up is worth running without collection (see gateway.heap)
    configure_logging(getattr(args, "verbose", False))
    from gateway.home import ensure_home, load_env, resolve_home

    home = resolve_home()
    if args.bot is not None:
        home = one_bot(home, args)
    if args.command == "setup":
        return _setup(home)
    if args.command == "config":
        return _config(home, args)
    if args.command == "doctor":
        from gateway.doctor.browser import check_browser
        from gateway.doctor.mcp import check_mcp
        from gateway.doctor.platforms import check_platforms
        from gateway.doctor.run import default_checks, run_doctor
        from gateway.doctor.sandbox import check_sandbox
        from gateway.doctor.web import check_web_search

        checks = [
            *default_checks(),
            check_platforms,
            check_web_search,
            check_mcp,
            check_sandbox,
            check_browser,
        ]
        return asyncio.run(run_doctor(home, offline=args.offline, out=sys.stdout, checks=checks))
    ensure_home(home)
    load_env(home)
    if args.command == "chat":
        return asyncio.run(_chat(home, args))
    if args.command == "insights":
        return asyncio.run(_insights(home))
    if args.command in ("gateway", "pairing"):
        from gateway.cli import gateway

        if args.command == "pairing":
            return gateway.run_pairing_command(home, args)
        if args.gateway_command == "run":
            configure_logging(getattr(args, "verbose", False), level=logging.INFO)  # one line per message
        return gateway.run_gateway_command(home, args)
    if args.command == "cron":
        from gateway.cli import cron

        return cron.run_cron_command(home, args)
    if args.command == "budget":
        from gateway.cli import budget

        return budget.run_budget_command(home, args)
    if args.command == "audit":
        from gateway.cli import audit

        return audit.run_audit_command(home, args)
    if args.command == "storage":
        from gateway.cli import storage

        return storage.run_storage_command(home, args)
    if args.command == "sessions":
        from gateway.cli import sessions

        return sessions.run_sessions_command(home, args)
    if args.command == "memory":
        from gateway.cli import memory

        return memory.run_memory_command(home, args)
    if args.command == "skills":
        from gateway.cli import skills

        return skills.run_skills_command(home, args)
    if args.command == "api":
        from gateway.cli import api

        return api.run_api_command(home, args)
    return EXIT_UNUSABLE


def main(argv: Sequence[str] | None = None) -> None:
    configure_streams()
    defer_collection()  # the process's policy, so not in run() (tests run many commands in one process)
    forbid_inspection()  # its commands cannot read its environment or memory (/proc/PID/environ)
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
