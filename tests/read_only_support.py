"""``herald`` commands on a home mounted read-only, for real: a read-only bind mount in a mount namespace
of the child's own (``unshare -m``), so nothing outside the child sees it and nothing is left mounted
however the test ends. File modes would not do: tests run as root, whom modes do not stop.

The commands run in one interpreter (``gateway.cli.dispatch.run`` each, as the binary does), so a dozen
cost one start-up; each one's exit code and output come back as JSON.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gateway.home import HeraldHome
from tests.fakes.waiting import PROCESS_TIMEOUT
from tests.helpers import Ran

REPOSITORY = Path(__file__).resolve().parents[1]
MOUNT_READ_ONLY = 'mount --bind "$HOME_DIR" "$HOME_DIR" && mount -o remount,bind,ro "$HOME_DIR" "$HOME_DIR"'


@functools.cache
def can_mount_read_only() -> bool:
    """Whether this machine lets the tests make a read-only bind mount in a namespace of their own."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    with tempfile.TemporaryDirectory() as directory:
        probe = f'{MOUNT_READ_ONLY} && ! touch "$HOME_DIR/x" 2>/dev/null'
        environment = {**os.environ, "HOME_DIR": directory}
        done = subprocess.run(["unshare", "-m", "sh", "-c", probe], env=environment, capture_output=True)
        return done.returncode == 0


def herald_on_read_only_home(home: HeraldHome, *commands: list[str]) -> list[Ran]:
    """Run each of ``commands`` (``["insights"]``, ``["memory", "show"]`` ...) with ``home`` read-only."""
    child = (
        f"import sys\nsys.path.insert(0, {str(REPOSITORY)!r})\n"
        "from tests.read_only_support import main\nmain()"
    )
    script = f'{MOUNT_READ_ONLY} && exec "$0" -c "$1" "$2"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, sys.executable, child, json.dumps(commands)],
        env={**os.environ, "HOME_DIR": str(home.root), "HERALD_HOME": str(home.root)},
        capture_output=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return [Ran(*result) for result in json.loads(done.stdout)]


def main() -> None:
    from gateway.cli.dispatch import configure_streams, run

    configure_streams()
    results = []
    for command in json.loads(sys.argv[1]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(command)
        results.append((code, out.getvalue(), err.getvalue()))
    sys.stdout.write(json.dumps(results))
