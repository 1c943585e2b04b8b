"""Keeping Herald's keys out of its commands' reach: no other process may read this one's memory.

Herald holds its keys in its environment and memory. A command it runs as the same user could read them
from ``/proc/PID/environ`` or ``/proc/PID/mem`` (``cat /proc/$PPID/environ``), and removing a key from
``os.environ`` does not change the first. A process that is not *dumpable* has those files owned by
root, so processes of the same user cannot open them (nor ptrace it, nor get a core dump of it). The
flag is this process's only: a command it starts (``execve``) is dumpable again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4


def forbid_inspection() -> bool:
    """Make this process non-dumpable (Linux); whether it now is. Elsewhere, or when libc refuses, it
    logs why and returns False: Herald runs on, as before."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0:
            return True
        log.warning(
            "prctl(PR_SET_DUMPABLE) failed (errno %d): commands of this user could read Herald's environment",
            ctypes.get_errno(),
        )
    except OSError as error:
        log.warning(
            "libc cannot be loaded (%s): commands of this user could read Herald's environment", error
        )
    return False
