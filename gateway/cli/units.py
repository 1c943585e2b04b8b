"""systemd units for ``herald gateway run``: a system unit (dedicated user, hardened), a template unit
for several instances of one cluster on a host (``herald-gateway@PORT``) and a user unit.

The files under ``systemd/`` are rendered from these templates (a test checks they match), and
``herald gateway install --user`` writes the user unit with this machine's paths.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

UNIT_NAME = "herald-gateway.service"

USER_UNIT = """\
# Herald gateway as a systemd user service.
# Install: herald gateway install --user   (or copy to ~/.config/systemd/user/ and edit the paths)
# Then:    systemctl --user daemon-reload && systemctl --user enable --now herald-gateway
# Logs:    journalctl --user -u herald-gateway -f
# Keep it running after you log out: loginctl enable-linger $USER

[Unit]
Description=Herald chat gateway
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
Environment=HERALD_HOME={home}
ExecStart={exec_start}
Restart=on-failure
RestartSec=5
# SIGTERM drains: running turns get gateway.drain_timeout seconds, then queued replies are sent.
TimeoutStopSec=60
KillSignal=SIGTERM

[Install]
WantedBy=default.target
"""

_SYSTEM_SERVICE = """\
[Unit]
Description={description}
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User=herald
Group=herald
Environment=HERALD_HOME={home}
ExecStart={exec_start}
Restart=on-failure
RestartSec=5
TimeoutStopSec=60
KillSignal=SIGTERM
UMask=0077

# Hardening: the gateway needs its home, the network, and nothing else.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
ReadWritePaths={home}
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
CapabilityBoundingSet=

[Install]
WantedBy=multi-user.target
"""

SYSTEM_UNIT = """\
# Herald gateway as a system service, run by a dedicated user.
# Install: sudo useradd --system --create-home --home-dir /var/lib/herald herald
#          sudo -u herald python3 -m venv /var/lib/herald/venv
#          sudo -u herald /var/lib/herald/venv/bin/pip install /path/to/herald
#          sudo cp herald-gateway.service /etc/systemd/system/ && sudo systemctl daemon-reload
#          sudo -u herald HERALD_HOME=/var/lib/herald/home /var/lib/herald/venv/bin/herald setup
#          (put the bot token and the API key in /var/lib/herald/home/.env)
#          sudo systemctl enable --now herald-gateway
# Logs:    journalctl -u herald-gateway -f

""" + _SYSTEM_SERVICE.replace("{description}", "Herald chat gateway")

TEMPLATE_UNIT_NAME = "herald-gateway@.service"
TEMPLATE_UNIT = """\
# Several Herald gateway processes of one cluster on this host: one instance per HTTP port
# (herald-gateway@8787, herald-gateway@8788, ...), each named HOSTNAME-PORT in the cluster.
# The shared config needs storage.url (PostgreSQL) and cluster.redis_url: docs/cluster.md in Herald's
# repository. Install the user, venv and home as for herald-gateway.service, then:
#          sudo cp herald-gateway@.service /etc/systemd/system/ && sudo systemctl daemon-reload
#          sudo systemctl enable --now herald-gateway@8787 herald-gateway@8788 herald-gateway@8789
# Logs:    journalctl -u 'herald-gateway@*' -f

""" + _SYSTEM_SERVICE.replace("{description}", "Herald chat gateway, cluster instance %i")
INSTANCE_OPTIONS = " --instance %H-%i --http-port %i"  # systemd: %H the host name, %i the instance (port)

# The values the committed files under systemd/ are rendered with.
DOC_USER = {"home": "%h/.herald", "exec_start": "%h/.local/bin/herald gateway run"}
DOC_SYSTEM = {"home": "/var/lib/herald/home", "exec_start": "/var/lib/herald/venv/bin/herald gateway run"}


def render_user_unit(home: str, exec_start: str) -> str:
    return USER_UNIT.format(home=home, exec_start=exec_start)


def render_system_unit(home: str, exec_start: str) -> str:
    return SYSTEM_UNIT.format(home=home, exec_start=exec_start)


def render_template_unit(home: str, exec_start: str) -> str:
    """``herald-gateway@.service``: ``exec_start`` plus the per-instance name and port."""
    return TEMPLATE_UNIT.format(home=home, exec_start=exec_start + INSTANCE_OPTIONS)


def this_exec_start() -> str:
    """The command that runs this Herald's gateway: the ``herald`` script, else this interpreter."""
    script = shutil.which("herald")
    if script:
        return f"{shlex.quote(str(Path(script).resolve()))} gateway run"
    return f"{shlex.quote(sys.executable)} -m gateway gateway run"


def user_unit_path() -> Path:
    return Path.home() / ".config" / "systemd" / "user" / UNIT_NAME


def install_user_unit(home: Path, path: Path | None = None) -> Path:
    """Write the user unit for this machine (replacing an older one) and return where."""
    target = path or user_unit_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_user_unit(str(home), this_exec_start()), encoding="utf-8")
    return target
