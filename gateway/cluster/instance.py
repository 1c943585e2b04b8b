"""This process's name in the cluster: ``cluster.instance_id``, or host-pid (unique while it runs)."""

from __future__ import annotations

import os
import re
import socket

from gateway.config import ClusterSettings


def instance_id(settings: ClusterSettings) -> str:
    if settings.instance_id is not None:
        return settings.instance_id
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:48] or "host"
    return f"{host}-{os.getpid()}"
