"""``herald api new-key``: a key for the OpenAI-compatible API, and the two ways to configure it.

It prints a new random key once, with what to write where: the key in ``.env`` and ``$NAME`` in
``config.yaml``, or only its SHA-256 in ``config.yaml`` (then the key is kept nowhere on this machine).
It writes nothing itself: the operator decides where the key lives.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import secrets

from gateway.home import HeraldHome

KEY_PREFIX = "sk-herald-"


def person(value: str) -> str:
    platform, _, user = value.partition(":")
    if not platform.isalpha() or not user:
        raise argparse.ArgumentTypeError(
            f"'{value}' is not platform:user_id (e.g. api:alice or telegram:12345)"
        )
    return value


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    api = commands.add_parser("api", parents=[common], help="the OpenAI-compatible API's keys")
    api_commands = api.add_subparsers(dest="api_command", required=True)
    new_key = api_commands.add_parser(
        "new-key", parents=[common], help="make a new API key and show how to configure it"
    )
    new_key.add_argument(
        "--person", type=person, default="api:me", help="who the key acts for (api:NAME, ...)"
    )


def variable_for(person: str) -> str:
    """The environment variable suggested for ``person``'s key: HERALD_API_KEY_ALICE for api:alice."""
    return "HERALD_API_KEY_" + re.sub(r"[^A-Za-z0-9]+", "_", person.partition(":")[2]).strip("_").upper()


def run_api_command(home: HeraldHome, args: argparse.Namespace) -> int:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    digest = hashlib.sha256(key.encode()).hexdigest()
    variable = variable_for(args.person)
    print(f"A new key for {args.person} (shown only now):\n\n  {key}\n")
    print(f"Either put it in {home.env_path}:\n\n  {variable}={key}\n")
    keys = "  api:\n    keys:\n      - {entry}\n"
    print("and in config.yaml:\n\n" + keys.format(entry=f"{{key: ${variable}, person: {args.person}}}"))
    print("or keep only its SHA-256 in config.yaml:\n")
    print(keys.format(entry=f"{{sha256: {digest}, person: {args.person}}}"))
    print("Then restart the gateway; clients use the key as their OpenAI API key.")
    return 0
