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

from gateway.chats import split_person_id
from gateway.home import HeraldHome

KEY_PREFIX = "sk-herald-"


def variable_for(person: str) -> str:
    """The environment variable suggested for ``person``'s key: HERALD_API_KEY_ALICE for api:alice."""
    return "HERALD_API_KEY_" + re.sub(r"[^A-Za-z0-9]+", "_", split_person_id(person)[1]).strip("_").upper()


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
