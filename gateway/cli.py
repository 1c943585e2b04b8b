"""The ``herald`` command line: setup, chat, config get/set, insights (gateway, pairing and cron commands
live in modules of their own)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from agent.store import open_session_store
from gateway import cli_cron, cli_gateway, insights
from gateway.config import ConfigError, get_value, load_config, set_value
from gateway.home import HeraldHome, ensure_home, load_env, resolve_home


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="herald", description="Herald: a chat gateway for LLM agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("setup", help="create HERALD_HOME with defaults (never overwrites)")

    chat = commands.add_parser("chat", help="chat in the terminal")
    chat.add_argument("-q", "--query", help="answer this once, print the answer to stdout and exit")
    chat.add_argument(
        "-c", "--continue", dest="resume", action="store_true", help="resume the latest session"
    )
    chat.add_argument("--provider", choices=["anthropic", "openai"], help="override model.provider")
    chat.add_argument("--model", help="override model.name")

    config = commands.add_parser("config", help="read or change config.yaml")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    getter = config_commands.add_parser("get", help="print the effective value of a dotted key")
    getter.add_argument("key")
    setter = config_commands.add_parser("set", help="set a dotted key (validated before writing)")
    setter.add_argument("key")
    setter.add_argument("value")

    commands.add_parser("insights", help="tokens, cache hit ratio and cost per session and purpose")
    cli_gateway.add_commands(commands)
    cli_cron.add_commands(commands)
    return parser


def configure_logging(verbose: bool, *, level: int = logging.WARNING) -> None:
    """``level`` for Herald's own logs (``-v``: debug); other libraries stay at warnings, so the SDKs'
    request dumps (which contain URLs with tokens) never reach the log."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for package in ("agent", "gateway", "adapters"):
        logging.getLogger(package).setLevel(logging.DEBUG if verbose else level)


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


async def _chat(home: HeraldHome, args: argparse.Namespace) -> int:
    from gateway.runtime import open_runtime  # imports a provider SDK: only for commands that chat
    from gateway.terminal import ask_once, interactive

    config = load_config(home.config_path)
    requested = args.provider is not None or args.model is not None
    async with open_runtime(
        config, home, provider=args.provider, model=args.model, context_dir=Path.cwd()
    ) as runtime:
        if args.query is not None:
            return await ask_once(
                runtime,
                args.query,
                resume=args.resume,
                out=sys.stdout,
                err=sys.stderr,
                model_requested=requested,
            )
        return await interactive(runtime, resume=args.resume, model_requested=requested)


async def _insights(home: HeraldHome) -> int:
    async with open_session_store(home.db_path) as store:
        sessions = await store.list_sessions(limit=100_000)
        print(insights.render(sessions, purposes=await store.usage_by_purpose()))
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """Run one ``herald`` command and return its exit code (errors are reported, never raised)."""
    try:
        return _dispatch(argv)
    except ConfigError as error:
        print(f"herald: configuration error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _dispatch(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    home = resolve_home()
    if args.command == "setup":
        return _setup(home)
    if args.command == "config":
        if args.config_command == "get":
            value = get_value(load_config(home.config_path), args.key)
            print(json.dumps(value) if isinstance(value, dict | list) or value is None else value)
            return 0
        set_value(home.config_path, args.key, args.value)
        print(f"{args.key} = {get_value(load_config(home.config_path), args.key)}")
        return 0
    ensure_home(home)
    load_env(home)
    if args.command == "chat":
        return asyncio.run(_chat(home, args))
    if args.command == "insights":
        return asyncio.run(_insights(home))
    if args.command == "gateway":
        if args.gateway_command == "run":
            configure_logging(args.verbose, level=logging.INFO)  # an operator reads one line per message
        return cli_gateway.run_gateway_command(home, args)
    if args.command == "pairing":
        return cli_gateway.run_pairing_command(home, args)
    if args.command == "cron":
        return cli_cron.run_cron_command(home, args)
    return 2


def main(argv: Sequence[str] | None = None) -> None:
    sys.exit(run(argv))
