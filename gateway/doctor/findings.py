"""What ``herald doctor``'s checks share: a finding, the context they look at, and what a check is.

Its own module so that every check (``gateway.doctor.run.*``) and the runner (``gateway.doctor.run``) import
these types from here, not from each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from gateway.config import HeraldConfig
from gateway.home import HeraldHome

Status = Literal["ok", "warn", "fail", "skip"]
MARKS: dict[Status, str] = {"ok": "[ok]  ", "warn": "[warn]", "fail": "[FAIL]", "skip": "[skip]"}
PROBLEMS: tuple[Status, ...] = ("warn", "fail")
PROBE_TIMEOUT = 5.0  # seconds for each request a check sends


@dataclass(frozen=True)
class Finding:
    """One result line: how it went, what it is about, and what is wrong and how to fix it."""

    status: Status
    subject: str
    text: str


@dataclass
class DoctorContext:
    """What the checks look at, and what they found that later checks use."""

    home: HeraldHome
    environ: dict[str, str]
    offline: bool
    config: HeraldConfig | None = None  # set by check_config when config.yaml is valid
    timeout: float = PROBE_TIMEOUT


Check = Callable[[DoctorContext], Awaitable[list[Finding]]]
